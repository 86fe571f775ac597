"""infer: the output type of every node, by each primitive's shape rule (a table of small
rules keyed by op, as JAX's abstract evaluation). Errors are located at the parameter the rule
names, or at the node; nodes downstream of a failed node are skipped, not reported twice.
"""

from __future__ import annotations

from archspec.diagnostics import Collector, error

from .ir import INPUT, Graph, Node
from .registry import PRIMITIVES, RuleError


class RuleContext:
    """What a shape rule may look at besides its inputs: other nodes (for `tie`)."""

    def __init__(self, graph: Graph, node: Node):
        self.graph, self.current = graph, node

    def node_named(self, name: str) -> Node:
        return self.graph.node(name)


def infer(graph: Graph) -> Graph:
    errors = Collector()
    failed: set[str] = set()
    for node in graph.nodes():
        if node.op == INPUT:
            continue
        if failed.intersection(node.inputs):
            failed.add(node.name)
            continue
        inputs = [graph.node(name).type for name in node.inputs]
        try:
            out = PRIMITIVES[node.op].infer(node.params, inputs, RuleContext(graph, node))
        except RuleError as exc:
            # A rule that names no parameter is about the node's inputs: point at its `from`, if it has one.
            errors.add(error(exc.message, node.param_loc(exc.field or "from"), node.name, exc.hint))
            failed.add(node.name)
            continue
        graph.set_type(node.name, out)
    errors.raise_if_any()
    graph.lint(inferred=True)
    return graph
