"""cost: parameters, FLOPs and activation bytes of every node, analytically (no torch).

FLOPs follow torch.utils.flop_counter.FlopCounterMode: a multiply-add counts 2, and only
matmuls, convolutions and attention products are counted. Figures are per sample (batch 1),
symbolic lengths at their largest. Activation bytes are those of the node's output.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import INPUT, Graph
from .registry import PRIMITIVES, Cost


@dataclass(frozen=True)
class NodeCost:
    params: int
    flops: int
    activation_bytes: int


def cost(graph: Graph) -> Graph:
    for node in graph.nodes():
        if node.op == INPUT:
            continue
        inputs = [graph.node(name).type for name in node.inputs]
        c: Cost = PRIMITIVES[node.op].cost(node.params, inputs, node.type)
        graph.meta(node.name)["cost"] = NodeCost(c.params, c.flops, node.type.nbytes())
    return graph


def totals(graph: Graph) -> NodeCost:
    costs = [graph.meta(n.name)["cost"] for n in graph.nodes() if n.op != INPUT]
    return NodeCost(sum(c.params for c in costs), sum(c.flops for c in costs),
                    sum(c.activation_bytes for c in costs))
