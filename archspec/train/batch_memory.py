"""Whether a training step fits in memory: an estimate from the checked report, before torch
allocates anything (torch-free).

A step keeps, per sample, every node's output at the sizes training runs at (symbolic lengths
at `size`, not at their largest as the report's activation_bytes are), about ACTIVATION_COPIES
times over (the output, what backward saves from it, its gradient), and, once, the weights, their
gradients and the optimizer's two moments. More than the memory available (archspec/budget.py:
ARCHSPEC_MAX_BUILD_BYTES, else what the system has) is a usage error naming the largest --batch
that fits.
"""

from __future__ import annotations

from ..budget import available_bytes, human
from ..core.errors import UsageError
from ..core.types import DTYPE_BYTES, Sym
from ..primitives.counting import FLOAT_BYTES

ACTIVATION_COPIES = 4  # per node output: itself, what backward saves, its gradient, slack
STATE_COPIES = 4  # per parameter: the weight, its gradient, AdamW's two moments


def size(d) -> int:
    """A concrete length for a symbolic one: short, so training stays quick."""
    return min(d.hi, max(d.lo, 16)) if isinstance(d, Sym) else d


def longest_size(d) -> int:
    """A symbolic length at its largest (real data: a token file's windows are that long)."""
    return d.hi if isinstance(d, Sym) else d


def sample_bytes(graph, at=size) -> int:
    """The bytes of every node's output (inputs included) for one sample at the training sizes
    (`at` gives a concrete length for a symbolic one)."""
    total = 0
    for node in graph.nodes():
        t = node.type
        if t is None:
            continue
        elements = 1
        for d in t.shape[1:]:
            elements *= at(d)
        total += elements * DTYPE_BYTES[t.dtype]
    return total


def check_batch_memory(report, batch: int, processes: int, longest: bool = False) -> None:
    """A UsageError when one process's share of --batch would need more memory than is available
    (`longest`: symbolic lengths at their largest, as --data trains them)."""
    have = available_bytes()
    if have is None:
        return
    fixed = STATE_COPIES * FLOAT_BYTES * report.params
    per_sample = ACTIVATION_COPIES * sample_bytes(report.graph, longest_size if longest else size)
    share = batch // processes
    need = fixed + share * per_sample
    if need <= have:
        return
    largest = max(0, (have - fixed) // max(per_sample, 1)) * processes
    allowed = f"from 1 to {largest}" if largest >= 1 else "at least 1, and not even 1 fits"
    raise UsageError(f"--batch must be {allowed} on this machine, got {batch}: a step would need about "
                     f"{human(need)} of memory ({human(per_sample)} per sample), and {human(have)} is available "
                     f"(ARCHSPEC_MAX_BUILD_BYTES sets the limit)")
