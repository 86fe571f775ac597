"""The options of a training run and their ranges (torch-free, so the command line can offer and
check them cheaply, before torch or a process group starts).

`check_options` refuses, as a usage error naming the option and its range, what the loop cannot
run or would run to a meaningless end: steps outside 1..MAX_STEPS, a batch that does not split
among the processes or exceeds the batch range the checker proves shapes for, a learning rate
or weight decay that is not finite (or not positive / not >= 0), a seed outside torch's range,
--fsdp or --ddp outside torchrun (or several processes with neither), and a --save or --resume
path that cannot be written or read. What needs the model (the memory a batch takes, the
contents of a resume file) is checked once it is built (memory.py, state.py).

The data options too: --data must name a folder with train/ and val/ class folders (and
torchvision and timm must be installed), a .npy or .bin token file, or module:function; the
validation fraction, epochs, warm-up, schedule, clipping norm, workers and evaluation interval
each have a range. --steps and --epochs exclude each other. What needs the data (its size, its
classes) is checked once it is read (data.py).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import KW_ONLY, dataclass

from ..core.errors import UsageError
from ..core.files import file_problem
from ..core.types import BATCH

DATASET = 64  # synthetic samples
MAX_STEPS = 1_000_000  # --steps, and the step a resume file may have reached
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets
TORCHRUN_HINT = "launch with torchrun, e.g. torchrun --nproc-per-node 2 -m archspec.train SPEC"
MAX_EPOCHS = 10_000
MAX_WORKERS = 64
MAX_VAL_FRACTION = 0.9
DEFAULT_STEPS = 20
DEFAULT_CLIP = 1.0  # --clip-grad with --data; off on the synthetic set
TOKEN_SUFFIXES = (".npy", ".bin")
HOOK = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # module:function
TRAIN_EXTRA = "pip install 'archspec-compiler[train]'"
AUGMENTS = ("none", "basic", "rand", "trivial")  # --aug; None: chosen by the image size (data.py)
MAX_MIX_ALPHA = 10.0  # --mixup / --cutmix: the Beta distribution's alpha
CHECKPOINTS = ("last.pt", "best.pt")  # what --save DIR/ keeps, beside epoch_N.pt and metrics.jsonl


@dataclass
class Options:
    spec: str
    _: KW_ONLY  # every option but the spec by its name
    overrides: dict | None = None
    steps: int | None = None  # None: DEFAULT_STEPS, unless --epochs sets the length
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
    data: str | None = None  # a folder of train/ and val/, a token file, or module:function
    val_fraction: float = 0.1  # the end of a token file (or of a hook's single dataset) kept for validation
    epochs: int | None = None  # instead of --steps: passes over the training set, counted from step 0
    warmup: int = 0  # steps of linear warm-up
    schedule: str | None = None  # cosine or constant; None: cosine with --data, constant without
    clip_grad: float | None = None  # the gradients' largest global norm; 0: off; None: 1.0 with --data, else off
    workers: int = 0  # DataLoader worker processes
    eval_every: int | None = None  # steps between validations; None: once an epoch
    aug: str | None = None  # none, basic, rand, trivial; None: by the image size (data.py)
    mixup: float = 0.0  # timm.data.Mixup's mixup alpha (0: off)
    cutmix: float = 0.0  # its cutmix alpha (0: off)
    smoothing: float = 0.0  # label smoothing of the training loss
    ema: float | None = None  # decay of an exponential moving average of the weights (None: off)
    save_every: int | None = None  # with --save DIR/: also keep epoch_N.pt every N epochs
    metrics: str | None = None  # a JSON-lines file, a line per evaluation (default DIR/metrics.jsonl)

    def __post_init__(self):
        if self.steps is None and self.epochs is None:
            self.steps = DEFAULT_STEPS

    @property
    def schedule_name(self) -> str:
        return self.schedule or ("cosine" if self.data else "constant")

    @property
    def save_folder(self) -> str | None:
        """The folder --save DIR/ keeps checkpoints in (None: --save FILE, or a sharded --fsdp folder)."""
        return self.save if self.save is not None and not self.fsdp and is_checkpoint_folder(self.save) else None

    @property
    def metrics_file(self) -> str | None:
        if self.metrics is not None:
            return self.metrics
        return os.path.join(self.save_folder, "metrics.jsonl") if self.save_folder else None

    @property
    def mixing(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0

    @property
    def clip_norm(self) -> float:
        """The clipping norm in force (0: no clipping)."""
        if self.clip_grad is not None:
            return self.clip_grad
        return DEFAULT_CLIP if self.data else 0.0


def check_options(options: Options) -> None:
    """A UsageError for the first option out of its range (see the module's docstring)."""
    processes = launched_processes()
    check_length(options)
    check_batch(options.batch, processes)
    check_real("--lr", options.lr, "a finite number > 0", lambda v: v > 0)
    check_real("--weight-decay", options.weight_decay, "a finite number >= 0", lambda v: v >= 0)
    check_seed(options.seed)
    check_optimizer(options.optimizer)
    check_mode(options, processes)
    check_data_options(options)
    check_recipe(options, processes)
    if options.data is not None:
        check_data(options.data)
    if options.resume is not None:
        check_resume(options.resume)
    if options.save is not None:
        if options.fsdp:
            check_save_folder("--save", options.save)
        elif options.save_folder:
            check_checkpoint_folder(options.save)
        else:
            check_writable("--save", options.save)
    if options.save_every is not None and not options.save_folder:
        raise UsageError("--save-every keeps epoch_N.pt in a checkpoint folder: give --save DIR/ too (a trailing /)")
    if options.metrics is not None:
        check_writable("--metrics", options.metrics)
    if options.dump is not None:
        check_writable("--dump", options.dump)


def whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_steps(steps) -> None:
    if not whole(steps) or not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps must be a whole number from 1 to {MAX_STEPS:,}, got {steps!r}")


def check_length(options: Options) -> None:
    """--steps or --epochs (not both), each in its range; a warm-up no longer than the steps."""
    if options.epochs is not None:
        if options.steps is not None:
            raise UsageError("give --steps or --epochs, not both (--epochs counts passes over the training set "
                             "from step 0, --steps the steps this run takes)")
        if not whole(options.epochs) or not 1 <= options.epochs <= MAX_EPOCHS:
            raise UsageError(f"--epochs must be a whole number from 1 to {MAX_EPOCHS:,}, got {options.epochs!r}")
    else:
        check_steps(options.steps)
    if not whole(options.warmup) or not 0 <= options.warmup <= MAX_STEPS:
        raise UsageError(f"--warmup must be a whole number of steps from 0 to {MAX_STEPS:,}, got {options.warmup!r}")
    if options.epochs is None and options.warmup > options.steps:
        raise UsageError(f"--warmup {options.warmup} is longer than the run's {options.steps} steps; give at most "
                         f"{options.steps}")


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


def check_data_options(options: Options) -> None:
    check_real("--val-fraction", options.val_fraction, f"a number from 0 to {MAX_VAL_FRACTION}",
               lambda v: 0 <= v <= MAX_VAL_FRACTION)
    if options.schedule not in (None, "cosine", "constant"):
        raise UsageError(f"--schedule must be cosine or constant, got {options.schedule!r}")
    if options.clip_grad is not None:
        check_real("--clip-grad", options.clip_grad, "a finite number >= 0 (0: no clipping)", lambda v: v >= 0)
    if not whole(options.workers) or not 0 <= options.workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be a whole number from 0 to {MAX_WORKERS}, got {options.workers!r}")
    if options.eval_every is not None and (not whole(options.eval_every) or
                                           not 1 <= options.eval_every <= MAX_STEPS):
        raise UsageError(f"--eval-every must be a whole number of steps from 1 to {MAX_STEPS:,}, "
                         f"got {options.eval_every!r}")


def check_recipe(options: Options, processes: int) -> None:
    """--aug, --mixup, --cutmix, --smoothing, --ema, --save-every in their ranges."""
    if options.aug is not None and options.aug not in AUGMENTS:
        raise UsageError(f"--aug must be one of {', '.join(AUGMENTS)}, got {options.aug!r}")
    for flag, value in (("--mixup", options.mixup), ("--cutmix", options.cutmix)):
        check_real(flag, value, f"a number from 0 (off) to {MAX_MIX_ALPHA:g}", lambda v: 0 <= v <= MAX_MIX_ALPHA)
    if options.mixing and (options.batch // processes) % 2:
        raise UsageError(f"--mixup/--cutmix mix each sample with another of its batch: --batch must be even per "
                         f"process, got {options.batch // processes}")
    if options.mixing and options.data is None:
        raise UsageError("--mixup/--cutmix mix real images: give --data DIR (an image folder) or "
                         "--data module:function")
    check_real("--smoothing", options.smoothing, "a number from 0 (off) to below 1", lambda v: 0 <= v < 1)
    if options.ema is not None:
        check_real("--ema", options.ema, "a decay between 0 and 1, e.g. 0.999", lambda v: 0 < v < 1)
        if options.fsdp:
            raise UsageError("--ema keeps a whole copy of the weights; it runs in one process or under --ddp, "
                             "not under --fsdp")
    if options.save_every is not None and (not whole(options.save_every) or
                                           not 1 <= options.save_every <= MAX_EPOCHS):
        raise UsageError(f"--save-every must be a whole number of epochs from 1 to {MAX_EPOCHS:,}, "
                         f"got {options.save_every!r}")


def check_checkpoint_folder(path: str) -> None:
    """--save DIR/: a folder to keep checkpoints in (made if absent) in a folder we may write."""
    folder = path.rstrip(os.sep) or path
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"--save: {folder} exists and is not a folder; give a new folder, e.g. --save runs/")
    if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--save: cannot write into {folder}: permission denied")
    check_parent_writable("--save", folder)


def is_checkpoint_folder(path: str) -> bool:
    """--save DIR/ (a trailing separator) or a folder an earlier run kept checkpoints in."""
    return path.endswith(os.sep) or os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, name)) for name in CHECKPOINTS)


def resume_file(path: str) -> str:
    """What --resume reads: a checkpoint folder's last.pt, else the path as given."""
    last = os.path.join(path, "last.pt")
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, ".metadata")) and os.path.isfile(last):
        return last
    return path


def data_kind(data: str) -> str:
    """What --data names: "images" (a folder), "tokens" (a file), "hook" (module:function)."""
    if os.path.isdir(data):
        return "images"
    if os.path.exists(data):
        return "tokens"
    if HOOK.fullmatch(data):
        return "hook"
    raise UsageError(f"--data: no such file or folder: {data} (give a folder with train/ and val/ class folders, "
                     f"a .npy or .bin token file, or module:function)")


def check_data(data: str) -> None:
    """A usage error for a --data that names nothing usable (see data_kind)."""
    kind = data_kind(data)
    if kind == "images":
        check_image_folders(data)
    elif kind == "tokens":
        if not data.endswith(TOKEN_SUFFIXES):
            raise UsageError(f"--data: {data} is neither a folder nor a token file (.npy, or .bin of uint16 tokens)")
        check_readable("--data", data)


def check_image_folders(data: str) -> None:
    for split in ("train", "val"):
        if not os.path.isdir(os.path.join(data, split)):
            raise UsageError(f"--data: {data} has no {split}/ folder; an image dataset is DIR/train/CLASS/*.png and "
                             f"DIR/val/CLASS/*.png (torchvision's ImageFolder layout)")
    missing = [name for name in ("torchvision", "timm") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"--data with an image folder needs {' and '.join(missing)}: {TRAIN_EXTRA}")


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
    problem = file_problem(path)
    if problem is None:
        return
    kind, words = problem
    if kind == "missing":
        raise UsageError(f"{flag}: no such file: {path}")
    raise UsageError(f"{flag}: {path} {words}" + ("; give the file --save wrote" if kind == "folder" else ""))


def check_resume(path: str) -> None:
    """A file --save wrote, a checkpoint folder (its last.pt), or a folder --save wrote under --fsdp
    (torch.distributed.checkpoint)."""
    path = resume_file(path)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, ".metadata")):
            raise UsageError(f"--resume: {path} is a folder without .metadata; give the folder or file --save wrote")
        return
    check_readable("--resume", path)


def check_save_folder(flag: str, path: str) -> None:
    """Under --fsdp: a folder to (re)write: absent, empty, or one --save wrote before."""
    if not path or os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag}: under --fsdp it writes a folder (sharded, torch.distributed.checkpoint); "
                         f"{path!r} is not one, e.g. {flag} state/")
    path = path.rstrip(os.sep) or path
    if os.path.isdir(path) and os.listdir(path) and not os.path.isfile(os.path.join(path, ".metadata")):
        raise UsageError(f"{flag}: {path} holds files that --save did not write; give a new or empty folder")
    check_parent_writable(flag, path)


def check_parent_writable(flag: str, path: str) -> None:
    """The folder that will hold `path` exists and we may write into it."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag}: the folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: cannot write into {parent}: permission denied")


def check_writable(flag: str, path: str) -> None:
    """A file that can be put in place: not a folder or device, in an existing folder we may write."""
    if not path or path.endswith(os.sep):
        raise UsageError(f"{flag}: {path!r} names no file; give a file name, e.g. {flag} state.pt")
    if os.path.isdir(path):
        extra = f", or {path.rstrip(os.sep)}{os.sep} (a trailing /) to keep last, best and every --save-every " \
                f"checkpoint there" if flag == "--save" else ""
        raise UsageError(f"{flag}: {path} is a folder; give a file name inside it, e.g. "
                         f"{os.path.join(path, 'state.pt')}{extra}")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(f"{flag}: {path} exists and is not a regular file (a pipe, socket or device)")
    check_parent_writable(flag, path)
