"""The options of a training run and their ranges (torch-free, so the command line can offer and
check them cheaply, before torch or a process group starts).

`check_options` refuses, as a usage error naming the option and its range, what the loop cannot
run or would run to a meaningless end: steps outside 1..MAX_STEPS, a batch that does not split
among the processes or exceeds the batch range the checker proves shapes for, a learning rate
or weight decay that is not finite (or not positive / not >= 0), a seed outside torch's range,
--fsdp or --ddp outside torchrun (or several processes with neither), and a --save or --resume
path that cannot be written or read. What needs the model (the memory a batch takes, the
contents of a resume file) is checked once it is built (memory.py, state.py).
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass

from ..core.errors import UsageError
from ..core.types import BATCH

DATASET = 64  # synthetic samples
MAX_STEPS = 1_000_000  # --steps, and the step a resume file may have reached
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets
TORCHRUN_HINT = "launch with torchrun, e.g. torchrun --nproc-per-node 2 -m archspec.train SPEC"


@dataclass
class Options:
    spec: str
    overrides: dict | None = None
    steps: int = 20
    batch: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.05
    optimizer: str = "adamw"
    seed: int = 0
    fsdp: bool = False
    ddp: bool = False
    bf16: bool = False
    checkpointing: bool = False
    save: str | None = None
    resume: str | None = None
    as_json: bool = False
    dump: str | None = None  # write the final loss and parameters (tests compare runs)


def check_options(options: Options) -> None:
    """A UsageError for the first option out of its range (see the module's docstring)."""
    processes = launched_processes()
    check_steps(options.steps)
    check_batch(options.batch, processes)
    check_real("--lr", options.lr, "a finite number > 0", lambda v: v > 0)
    check_real("--weight-decay", options.weight_decay, "a finite number >= 0", lambda v: v >= 0)
    check_seed(options.seed)
    check_optimizer(options.optimizer)
    check_mode(options, processes)
    if options.resume is not None:
        check_readable("--resume", options.resume)
    for flag, path in (("--save", options.save), ("--dump", options.dump)):
        if path is not None:
            check_writable(flag, path)


def whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_steps(steps) -> None:
    if not whole(steps) or not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps must be a whole number from 1 to {MAX_STEPS:,}, got {steps!r}")


def check_batch(batch, processes: int) -> None:
    """The global batch: a multiple of the processes, each share within the checker's batch range."""
    largest = BATCH.hi * processes
    if not whole(batch) or not 1 <= batch <= largest:
        per_process = f" ({BATCH.hi} per process)" if processes > 1 else ""
        raise UsageError(f"--batch must be a whole number from 1 to {largest}{per_process}, the batch sizes "
                         f"the checker proves shapes for, got {batch!r}")
    if batch % processes:
        raise UsageError(f"--batch {batch} does not divide among {processes} processes; give a multiple of "
                         f"{processes}")


def check_real(flag: str, value, allowed: str, in_range) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not in_range(value):
        raise UsageError(f"{flag} must be {allowed}, got {value!r}")


def check_seed(seed) -> None:
    from .. import SEED_MAX

    if not whole(seed) or not 0 <= seed <= SEED_MAX:
        raise UsageError(f"--seed must be a whole number from 0 to {SEED_MAX} (2^64 - 1), got {seed!r}")


def check_optimizer(name) -> None:
    if name not in ("adamw", "sgd"):
        raise UsageError(f"--optimizer must be adamw or sgd, got {name!r}")


# -- processes --------------------------------------------------------------------------------------


def launched_processes() -> int:
    """How many processes torchrun started (1 outside torchrun); a UsageError for a partial or
    malformed launch environment."""
    present = [name for name in LAUNCH_VARIABLES if name in os.environ]
    if not present:
        return 1
    missing = [name for name in LAUNCH_VARIABLES if name not in os.environ]
    if missing:
        raise UsageError(f"{', '.join(present)} set but not {', '.join(missing)}: torchrun sets them all; "
                         f"{TORCHRUN_HINT}")
    rank, size, local = (launch_number(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    if size < 1 or not 0 <= rank < size or local < 0:
        raise UsageError(f"RANK={rank}, WORLD_SIZE={size}, LOCAL_RANK={local} are not a process of a torchrun "
                         f"launch; {TORCHRUN_HINT}")
    return size


def launch_number(name: str) -> int:
    text = os.environ[name]
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{name}={text!r} is not a whole number; {TORCHRUN_HINT}") from None


def check_mode(options: Options, processes: int) -> None:
    """--fsdp and --ddp need torchrun's processes; several processes need one of them."""
    if options.fsdp and options.ddp:
        raise UsageError("choose --fsdp or --ddp, not both")
    mode = "--fsdp" if options.fsdp else "--ddp" if options.ddp else None
    under_torchrun = "RANK" in os.environ
    if mode and not under_torchrun:
        raise UsageError(f"{mode} needs torchrun's processes (RANK, WORLD_SIZE, LOCAL_RANK are not set); "
                         f"{TORCHRUN_HINT} {mode}")
    if processes > 1 and not mode:
        raise UsageError(f"{processes} processes would each train a copy of the model apart; add --fsdp or --ddp")


# -- files ------------------------------------------------------------------------------------------


def check_readable(flag: str, path: str) -> None:
    """A regular file that can be read (a FIFO or device is never opened)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{flag}: no such file: {path}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{flag}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{flag}: {path} is a folder; give the file --save wrote")
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{flag}: {path} is not a regular file (a pipe, socket or device)")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag}: cannot read {path}: permission denied")


def check_writable(flag: str, path: str) -> None:
    """A file that can be put in place: not a folder or device, in an existing folder we may write."""
    if not path or path.endswith(os.sep):
        raise UsageError(f"{flag}: {path!r} names no file; give a file name, e.g. {flag} state.pt")
    if os.path.isdir(path):
        raise UsageError(f"{flag}: {path} is a folder; give a file name inside it, e.g. "
                         f"{os.path.join(path, 'state.pt')}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(f"{flag}: {path} exists and is not a regular file (a pipe, socket or device)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag}: the folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: cannot write into {parent}: permission denied")
