"""Where a failed engine build failed: the fx node torch-tensorrt was converting.

In the child process, `FailedNode.of_exception` walks the exception's tracebacks (and its
causes) for the converting interpreter's current node (`self._cur_node`, torch-tensorrt's
TRTInterpreter); it crosses the process boundary as a JSON-able record, and in the parent
`FailedNode.locate` finds the spec node it came from (lower.locate: the node's stack trace,
then its module stack).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from archspec.core.errors import Loc
from archspec.core.ir import Graph

from ...lower import locate, module_paths_of
from .coverage import op_name


@dataclass(frozen=True)
class FailedNode:
    op: str
    fx_node: str
    stack_trace: str | None
    module_paths: tuple[str, ...]

    @classmethod
    def of_exception(cls, exc: BaseException) -> "FailedNode | None":
        """The fx node torch-tensorrt was converting when `exc` was raised (from its interpreter)."""
        seen = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            found = _converting_node(exc.__traceback__)
            if found is not None:
                return cls(op_name(found.target), found.name, found.meta.get("stack_trace"),
                           tuple(module_paths_of(found)))
            exc = exc.__cause__ or exc.__context__
        return None

    def locate(self, graph: Graph) -> tuple[str | None, Loc | None]:
        """The spec node (path, source location) this fx node came from, where known."""
        return locate(graph, self.stack_trace, self.module_paths)

    def to_json(self) -> dict:
        return {"op": self.op, "fx_node": self.fx_node, "stack_trace": self.stack_trace,
                "module_paths": list(self.module_paths)}

    @classmethod
    def from_json(cls, record: dict) -> "FailedNode":
        return cls(record["op"], record["fx_node"], record["stack_trace"], tuple(record["module_paths"]))


def _converting_node(tb) -> torch.fx.Node | None:
    """The innermost frame's `self._cur_node` along one traceback."""
    found = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        node = getattr(owner, "_cur_node", None)
        if isinstance(node, torch.fx.Node):
            found = node
        tb = tb.tb_next
    return found
