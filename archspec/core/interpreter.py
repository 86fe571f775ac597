"""The one walker of the IR, after torch.fx's Interpreter: visit the nodes in topological
order, dispatch per node, keep each node's result.

Shape inference, costing and lowering subclass it and define `placeholder` (a graph input)
and `call` (a primitive node, given its inputs' results). A result is kept in `env` and,
when the pass has a `key`, in the node's meta (`meta["type"]`, `meta["cost"]`).

A node whose rule raises `NodeFailed` is recorded as failed; nodes that read a failed node
are skipped, so one mistake is reported once, not again at every node downstream. The
diagnostics a pass collects are raised together at the end (`SpecError`).
"""

from __future__ import annotations

from typing import Any

from .errors import Collector, Diagnostic
from .ir import Graph, NodeView


class NodeFailed(Exception):
    """A node's rule failed; its diagnostics are in `diagnostics` (may be empty when the
    failure was reported already)."""

    def __init__(self, *diagnostics: Diagnostic):
        super().__init__("; ".join(d.message for d in diagnostics))
        self.diagnostics = list(diagnostics)


class Interpreter:
    key: str | None = None  # the meta entry this pass writes, if any

    def __init__(self, graph: Graph):
        self.graph = graph
        self.env: dict[str, Any] = {}
        self.failed: set[str] = set()
        self.errors = Collector()

    def run(self) -> Any:
        for node in self.graph.nodes():
            self.run_node(node)
        self.errors.raise_if_any()
        return self.output()

    def run_node(self, node: NodeView) -> None:
        inputs = node.inputs
        if self.failed.intersection(inputs):
            self.failed.add(node.name)
            return
        try:
            if node.is_input:
                result = self.placeholder(node)
            else:
                result = self.call(node, [self.env[name] for name in inputs])
        except NodeFailed as exc:
            self.errors.extend(exc.diagnostics)
            self.failed.add(node.name)
            return
        self.env[node.name] = result
        if self.key is not None:
            node.meta[self.key] = result

    # -- what subclasses define ------------------------------------------------------------
    def placeholder(self, node: NodeView) -> Any:
        """The result of a graph input."""
        return node.meta.get(self.key) if self.key else None

    def call(self, node: NodeView, inputs: list[Any]) -> Any:
        """The result of a primitive node, given its inputs' results."""
        raise NotImplementedError

    def output(self) -> Any:
        """What `run` returns once every node is done."""
        return self.graph
