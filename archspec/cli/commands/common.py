"""Arguments several commands share: the spec, its --set overrides, sizes, seeds, counts and
batch sizes (a batch the machine's memory cannot hold is a usage error, not a crash)."""

from __future__ import annotations

from ... import SEED_MAX
from ...arguments import overrides_of, spec_path  # noqa: F401 - the commands' too (train's options read them)
from ...core.errors import UsageError


def add_spec_arguments(parser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="path of a YAML spec, or a shipped spec's name (archspec models)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override params, e.g. --set img=256 depths=[2,2,18,2] (or one --set each; "
                             "main.one_value_per_set splits them)")


def size_range(text: str, option: str) -> tuple[int, int]:
    """MIN:MAX of square input sizes (`check --sizes`, `build --size`)."""
    from ...sizes import LARGEST_SIZE

    lo, sep, hi = text.partition(":")
    try:
        bounds = (int(lo), int(hi)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or not 1 <= bounds[0] <= bounds[1] <= LARGEST_SIZE:
        raise UsageError(f"{option} takes MIN:MAX with 1 <= MIN <= MAX <= {LARGEST_SIZE}, got {text!r}")
    return bounds


def checked_seed(seed: int) -> int:
    """--seed: torch.manual_seed's range, or a usage error."""
    if not 0 <= seed <= SEED_MAX:
        raise UsageError(f"--seed must be a whole number from 0 to {SEED_MAX} (2^64 - 1), got {seed}")
    return seed


def counted(value: int, option: str, low: int, high: int, why: str = "") -> int:
    """A whole-number option within [low, high], or a usage error naming the option and the range."""
    if not low <= value <= high:
        raise UsageError(f"{option} takes {low} to {high:,}{why}, got {value}")
    return value


def batch_sizes(text: str | None, option: str = "--batch"):
    """N or MIN:OPT:MAX (`check --target`, `build`) as a BatchRange, each size within the batch
    sizes the checker proves shapes for (1 to BATCH.hi), or a usage error."""
    from ...compiler.backends.batch import BatchRange
    from ...core.types import BATCH

    try:
        batch = BatchRange.parse(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if batch.max > BATCH.hi:
        raise UsageError(f"{option} takes sizes from 1 to {BATCH.hi:,} (the batch sizes the checker proves shapes "
                         f"for), got {text!r}")
    return batch


def batch_fits_memory(report, batch: int, option: str = "--batch") -> None:
    """A usage error when running the checked model at `batch` needs more memory than this machine
    has available (or than ARCHSPEC_MAX_BUILD_BYTES allows): its weights (budget.py's estimate)
    and, at that batch, every node's output, as if none were freed (on the high side)."""
    from ...budget import module_bytes
    from ...core.memory import MAX_BUILD_BYTES, available_bytes, human

    have = available_bytes()
    weights = sum(module_bytes(row) for row in report.nodes)
    per_sample = sum(row.activation_bytes for row in report.nodes)
    if have is None or weights + batch * per_sample <= have:
        return
    largest = (have - weights) // per_sample if per_sample and have > weights else 0
    allowed = f"{option} takes 1 to {largest:,} here" if largest >= 1 else "not even batch 1 fits here"
    raise UsageError(f"{option} {batch}: this model needs about {human(weights + batch * per_sample)} of memory at "
                     f"that batch ({human(per_sample)} of activations per sample), and {human(have)} is available: "
                     f"{allowed} (set {MAX_BUILD_BYTES} to allow more)")


def require_cuda(option: str = "--device cuda") -> None:
    """A usage error when torch sees no CUDA GPU here, naming torch's version and its CUDA."""
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"{option}: torch sees no CUDA GPU on this machine "
                         f"(torch {torch.__version__}, CUDA {torch.version.cuda or 'not built in'})")
