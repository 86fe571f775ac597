"""A backend's run of the model that runs out of memory: a located SpecError (exit 1), not a crash.

`archspec build` estimates the memory first (archspec/budget.py) and refuses what will not fit,
but an estimate can fall short (another process takes the memory meanwhile, a target holds more
than counted). ONNX Runtime then raises "Failed to allocate memory for requested buffer of size
N", torch "DefaultCPUAllocator: can't allocate memory" (or CUDA's "out of memory"), Python a
MemoryError. Each becomes "ran out of memory", located at the node whose run needs the most:
the attention node with the largest score matrices when the run holds them whole (ONNX Runtime),
else the node with the largest output.
"""

from __future__ import annotations

import re

from archspec.core.errors import error
from archspec.core.memory import ALLOCATION_FAILURES, human, ran_out_of_memory  # noqa: F401 (re-exported)

REQUESTED = re.compile(r"(?:buffer of size|allocate) (\d+)(?: bytes)?", re.IGNORECASE)


def out_of_memory_error(what: str, graph, exc: BaseException, *, scores: bool, hint: str | None = None):
    """The SpecError for `what` (e.g. "ONNX Runtime's check of model.onnx") having run out of
    memory, located at the node that needs the most (`scores`: the run holds attention score
    matrices whole); `hint`: what else to try."""
    path = heaviest_node(graph, scores)
    record = graph.record(path) if path is not None else None
    asked = REQUESTED.search(str(exc))
    detail = f" (a request for {human(int(asked.group(1)))} failed)" if asked else ""
    cause = (f"the attention scores of {path} (heads x queries x keys, held whole)"
             if scores and path is not None and graph.node(path).meta["cost"].score_bytes
             else "the model's tensors at the example batch")
    return error(f"{what} ran out of memory{detail}: {cause} need more than this machine has free",
                 record.loc if record is not None else None, path,
                 hint="use a smaller input size or sequence length" + (f", or {hint}" if hint else ""))


def heaviest_node(graph, scores: bool) -> str | None:
    """With `scores`, the attention node with the largest scores (if any); else the node with
    the largest output."""
    nodes = [node for node in graph.nodes() if not node.is_input and "cost" in node.meta]
    if not nodes:
        return None
    most_scores = max(nodes, key=lambda node: node.meta["cost"].score_bytes)
    if scores and most_scores.meta["cost"].score_bytes:
        return most_scores.name
    return max(nodes, key=lambda node: node.meta["cost"].activation_bytes).name
