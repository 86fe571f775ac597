"""`python -m archspec.train SPEC [options]`: see archspec/train/__init__.py."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..core.errors import LocatedError, UsageError
from . import __doc__ as DOC, add_arguments, options_of, train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m archspec.train", description=DOC.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        summary = train(options_of(args))
    except UsageError as exc:
        print(f"archspec train: error: {exc}", file=sys.stderr)
        return 2
    except LocatedError as exc:
        from ..core.output import print_errors

        print_errors(exc, False)
        return 1
    if args.json and int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(summary, indent=2))
    return 0


def leave(code: int) -> None:
    """Under torchrun a process leaves without the interpreter's teardown. There a C++ static of
    torch's sometimes destroys a thread still joinable, and a process that trained and saved
    aborts after its last line of Python (`terminate called without an active exception`, exit
    -6, no Python frame on the stack; 1 in 90 two-process FSDP runs, three at once on 2 cores,
    and 2 of the last 4 CI runs). The process group is destroyed and every file closed before
    this; only the output buffers are left to flush."""
    if "RANK" not in os.environ:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
