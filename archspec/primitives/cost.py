"""cost: parameters, FLOPs and activation bytes of every node, analytically (no torch).

FLOPs follow torch.utils.flop_counter.FlopCounterMode: a multiply-add counts 2, and only
matmuls, convolutions and attention products are counted. Figures are per sample (batch 1),
symbolic lengths at their largest. Activation bytes are those of the node's output; buffer
bytes the fixed tables, indices and masks its module precomputes; score bytes the attention
score matrices it computes (attention nodes only), which a fused kernel never holds whole but
ONNX Runtime's spelled-out attention does.
Results: meta["cost"].
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.interpreter import Interpreter
from ..core.ir import Graph, NodeView
from .infer import GraphContext


@dataclass(frozen=True)
class NodeCost:
    params: int
    flops: int
    activation_bytes: int
    buffer_bytes: int = 0
    score_bytes: int = 0


class Costing(Interpreter):
    key = "cost"

    def placeholder(self, node: NodeView) -> None:
        return None

    def call(self, node: NodeView, inputs) -> NodeCost:
        types = [self.graph.type_of(name) for name in node.inputs]
        c = node.op.cost(node.params, types, node.type, GraphContext(self.graph, node))
        return NodeCost(c.params, c.flops, node.type.nbytes(), c.buffer_bytes, c.score_bytes)


def cost(graph: Graph) -> Graph:
    Costing(graph).run()
    return graph


def totals(graph: Graph) -> NodeCost:
    costs = [n.meta["cost"] for n in graph.nodes() if not n.is_input]
    return NodeCost(sum(c.params for c in costs), sum(c.flops for c in costs),
                    sum(c.activation_bytes for c in costs), sum(c.buffer_bytes for c in costs),
                    sum(c.score_bytes for c in costs))
