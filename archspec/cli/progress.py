"""Progress of a long command: one line per step on stderr, what it did and how long it took.
A step that fails inside lowering or a backend is reported at the spec node it happened in."""

from __future__ import annotations

import contextlib
import errno
import logging
import re
import shutil
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field

from ..core.errors import InternalError, LocatedError, UsageError, bug

# what the system refuses for reasons of its own (room, permission, a read-only mount, a quota)
SYSTEM_REFUSED = {errno.ENOSPC, errno.EACCES, errno.EPERM, errno.EROFS, errno.EDQUOT, errno.EFBIG}


# libraries whose advice (warnings, log records below ERROR) would land inside a step's progress line:
# the ONNX exporter and its optimizer (issue 39: 16 lines of them inside the ONNX build's step)
CHATTY = ("onnxscript", "onnx_ir", "onnx", "torch.onnx")


def _chatty(record: logging.LogRecord) -> bool:
    """False (drop it) for a record below ERROR from a chatty library's logger or its children."""
    return record.levelno >= logging.ERROR or not any(
        record.name == name or record.name.startswith(name + ".") for name in CHATTY)


@contextlib.contextmanager
def libraries_quiet():
    """Within the block, the chatty libraries' warnings and log records below ERROR are dropped
    (from the handlers that would print them: the root's, and logging's last resort)."""
    handlers = [h for h in logging.getLogger().handlers + [logging.lastResort] if h is not None]
    for handler in handlers:
        handler.addFilter(_chatty)
    try:
        with warnings.catch_warnings():
            for name in CHATTY:
                warnings.filterwarnings("ignore", module=re.escape(name) + r"(\..*)?$")
            yield
    finally:
        for handler in handlers:
            handler.removeFilter(_chatty)


@dataclass
class Progress:
    total: int
    stream: object = field(default_factory=lambda: sys.stderr)
    step: int = 0
    graph: object = None  # the IR, once checked: failures are located at its nodes
    after_step: object = None  # called after each step that succeeded (may raise to stop the command)
    writes_to: str | None = None  # the folder the steps write into: a full disk there is named as such
    writes_shown: str | None = None  # that folder as the user named it

    def run(self, title: str, fn, describe=lambda result: ""):
        self.step += 1
        print(f"[{self.step}/{self.total}] {title} ...", end="", file=self.stream, flush=True)
        start = time.perf_counter()
        try:
            with libraries_quiet():
                result = fn()
        except (LocatedError, UsageError):
            print(" failed", file=self.stream, flush=True)
            raise
        except OSError as exc:
            print(" failed", file=self.stream, flush=True)
            if exc.errno in SYSTEM_REFUSED:  # a full disk, no permission: the machine's state, not a bug
                where = f": {exc.filename}" if exc.filename else ""
                raise UsageError(f"{title}: the system refused ({exc.strerror}){where}") from None
            raise located_failure(exc, self.graph, title) from exc
        except Exception as exc:  # a backend failure: located at the node it happened in
            print(" failed", file=self.stream, flush=True)
            full = disk_full(self.writes_to, self.writes_shown)
            if full:  # torch.save and others say so in their own words (a RuntimeError)
                raise UsageError(f"{title}: {full}") from None
            raise located_failure(exc, self.graph, title) from exc
        detail = describe(result)
        print(f" {time.perf_counter() - start:.1f} s{'  ' + detail if detail else ''}", file=self.stream, flush=True)
        if self.after_step is not None:
            self.after_step()
        return result


def disk_full(folder: str | None, shown: str | None = None, room: int = 64 << 20) -> str | None:
    """'the disk holding FOLDER is full ...' when less than `room` bytes are left there; else None."""
    if folder is None:
        return None
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    return f"the disk holding {shown or folder} is full ({free >> 20} MiB left)" if free < room else None


def located_failure(exc: Exception, graph, step: str) -> InternalError:
    """A failure inside lowering or a backend, reported at the spec node it happened in.

    The traceback repeats the spec frames lowering writes on fx nodes; lower.locate reads
    them. Such a failure is a bug (in archspec or torch), not a problem with the spec: the
    CLI exits with 3 and says so.
    """
    from ..compiler.lower import locate

    text = f"{exc}\n" + "".join(traceback.format_exception(exc))
    first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    path, loc = locate(graph, text) if graph is not None else (None, None)
    return bug(f"{step} failed: {type(exc).__name__}: {first[:300]}", loc, path,
               hint="the spec passed the checker, so this is a bug in archspec or torch; "
                    "set ARCHSPEC_DEBUG=1 for the full traceback")
