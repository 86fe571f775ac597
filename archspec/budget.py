"""Whether a checked spec can be built on this machine: the memory its build needs, estimated
from the report before torch allocates anything.

A spec whose sizes pass every shape rule may still ask for more memory than any machine has
(`mlp: {hidden: 16777216}` on a width of 16,777,216 is 2.8e14 parameters). Building it would
fail deep inside torch, or worse, succeed in reserving the memory and then exhaust the
machine while initialising it. So `build` first estimates what it needs (the parameters in
float32, twice: the model and what is saved or exported from it; the fixed tables, indices and
masks its modules precompute, which grow with the input size; for targets that run the model,
its activations at the example batch; for targets whose run spells attention out, its score
matrices) and refuses, with a plain error, a build that needs more than the memory available
(or than ARCHSPEC_MAX_BUILD_BYTES, when set).

Attention scores: heads x queries x keys floats per attention node and sample (`score_bytes` in
the report), N^2 in the sequence length. A fused kernel streams them (PyTorch's CPU attention,
with or without a mask: measured 2 MB for [3, 2, 4096, 4096] scores of 384 MB), but the ONNX
model is attention spelled out as MatMul, Softmax, MatMul, and ONNX Runtime holds the scores
and their softmax at once when the build checks it at the example batch: measured 806 MB more
for those 384 MB of scores (2.1 times; 438 MB for four layers of [3, 4, 2048, 2048] scores of
192 MB each). The nodes run one after another, so the node with the most scores counts,
SCORE_COPIES times, at the example batch. A target says whether its run does this
(`Target.materializes_scores`; the build passes `scores=`).
"""

from __future__ import annotations

from .core.errors import error
from .core.memory import MAX_BUILD_BYTES, available_bytes, human
from .primitives.counting import FLOAT_BYTES

EXAMPLE_BATCH = 3  # the batch the build runs the model at (up to 3: ONNX Runtime's check)
EXAMPLE_RUNS = EXAMPLE_BATCH * 3  # example batch x intermediate tensors per node (about 3)
SCORE_COPIES = 2.2  # the scores and their softmax, held together by ONNX Runtime, and its arena's slack

__all__ = ["MAX_BUILD_BYTES", "available_bytes", "check_build_memory", "human", "needed_bytes"]


def needed_bytes(report, runs_model: bool, scores: bool = False) -> int:
    """About the memory a build of `report` needs (an estimate, on the high side); `scores`: its
    run holds attention score matrices whole."""
    weights = sum(module_bytes(row) for row in report.nodes)
    if not runs_model:
        return weights
    activations = EXAMPLE_RUNS * sum(row.activation_bytes for row in report.nodes)
    return weights + activations + (score_need(report) if scores else 0)


def score_need(report) -> int:
    """The most memory one attention node's scores take in the build's run."""
    return int(SCORE_COPIES * EXAMPLE_BATCH * max((row.score_bytes for row in report.nodes), default=0))


def check_build_memory(report, runs_model: bool = True, scores: bool = False) -> None:
    """A SpecError, located at the node that needs the most (its module, or with `scores` its
    attention scores), when the build would need more memory than it may use."""
    need, have = needed_bytes(report, runs_model, scores), available_bytes()
    if have is None or need <= have:
        return
    counted = scores and runs_model and score_need(report) > 0
    if counted and score_need(report) >= largest_module_bytes(report):
        path = largest_scores(report)
    else:
        path = largest_module(report)
    loc = report.graph.record(path).loc if path is not None else None
    message = (f"building this model needs about {human(need)} of memory "
               f"({' plus '.join(parts(report, runs_model, counted))}), and {human(have)} is available")
    if counted:
        message += (f"; the attention scores of {largest_scores(report)} alone take {human(score_need(report))} "
                    f"(heads x queries x keys at batch {EXAMPLE_BATCH}, held whole by this target's run)")
    raise error(message, loc, path, hint=f"check the sizes (dim, hidden, heads, input size or sequence length); "
                                         f"set {MAX_BUILD_BYTES} to allow more")


def parts(report, runs_model: bool, scores: bool) -> list[str]:
    """What the estimate is made of, in words."""
    buffers = sum(row.buffer_bytes for row in report.nodes)
    words = [f"{report.params:,} parameters in float32"]
    words += [f"{human(buffers)} of fixed tables and masks"] * bool(buffers) + ["activations"] * runs_model
    return words + ["attention scores"] * scores


def largest_module(report) -> str | None:
    """The node whose module needs the most (None when no node has parameters or tables)."""
    largest = max(report.nodes, key=module_bytes, default=None)
    return largest.path if largest is not None and module_bytes(largest) else None


def largest_module_bytes(report) -> int:
    return max((module_bytes(row) for row in report.nodes), default=0)


def largest_scores(report) -> str | None:
    """The attention node with the largest score matrices."""
    largest = max(report.nodes, key=lambda row: row.score_bytes, default=None)
    return largest.path if largest is not None and largest.score_bytes else None


def module_bytes(row) -> int:
    """A node's parameters in float32, twice (the model and what is saved or exported from it),
    and its fixed tables."""
    return 2 * FLOAT_BYTES * row.params + row.buffer_bytes
