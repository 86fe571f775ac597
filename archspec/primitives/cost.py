"""cost: parameters, FLOPs and activation bytes of every node, analytically (no torch).

FLOPs follow torch.utils.flop_counter.FlopCounterMode: a multiply-add counts 2, and only
matmuls, convolutions and attention products are counted. Figures are per sample (batch 1),
symbolic lengths at their largest. Activation bytes are those of the node's output; buffer
bytes the fixed tables, indices and masks its module precomputes; score bytes the attention
score matrices it computes (attention nodes only), which a fused kernel never holds whole but
ONNX Runtime's spelled-out attention does.
A node that uses another's weights (a copy of a `share: true` repeat, meta["shared_with"])
counts no parameters: they are counted once, at the node that holds them; its own parameter
count must equal that node's (one set of weights serves both).
Results: meta["cost"].
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.errors import Diagnostic
from ..core.interpreter import Interpreter, NodeFailed
from ..core.ir import Graph, NodeView
from ..core.types import TensorType, batch_factor
from .infer import GraphContext


@dataclass(frozen=True)
class NodeCost:
    params: int
    flops: int
    activation_bytes: int
    buffer_bytes: int = 0
    score_bytes: int = 0
    shared_with: str | None = None  # the node whose parameters these are (counted there)


class Costing(Interpreter):
    key = "cost"

    def placeholder(self, node: NodeView) -> None:
        return None

    def own_cost(self, node: NodeView):
        """The op's cost rule at this node (its parameters as if it held its own)."""
        types = [self.graph.type_of(name) for name in node.inputs]
        return node.op.cost(node.params, types, node.type, GraphContext(self.graph, node))

    def call(self, node: NodeView, inputs) -> NodeCost:
        c = scaled(self.own_cost(node), rows_per_sample(self.graph, node))
        owner = node.meta.get("shared_with")
        if owner is None:
            return NodeCost(c.params, c.flops, node.type.nbytes(), c.buffer_bytes, c.score_bytes)
        held = self.own_cost(self.graph.node(owner)).params
        if c.params != held:
            raise NodeFailed(Diagnostic(f"this node would have {c.params:,} parameters, and {owner}, whose weights "
                                        f"it uses (a copy of a shared repeat, or weights_of), has {held:,}",
                                        node.loc, node.name,
                                        hint="nodes that share weights have the same parameter sizes: they read "
                                             "inputs of the same width, and an option that changes a size cannot "
                                             "depend on the repeat index"))
        return NodeCost(0, c.flops, node.type.nbytes(), c.buffer_bytes, c.score_bytes, owner)


def rows_per_sample(graph: Graph, node: NodeView) -> int:
    """How many rows of its batch make one sample where the node works on a folded batch (B*k:
    per frame of a video folded by a rearrange, k frames a sample); 1 elsewhere."""
    types = [node.type] + [graph.type_of(name) for name in node.inputs]
    return max((batch_factor(t.shape[0]) or 1 for t in types if isinstance(t, TensorType) and t.shape), default=1)


def scaled(c, rows: int):
    """A rule's cost (per row of the batch) per sample: FLOPs and score bytes times the rows a
    sample has; the parameters are the same."""
    if rows == 1:
        return c
    return replace(c, flops=c.flops * rows, score_bytes=c.score_bytes * rows)


def cost(graph: Graph) -> Graph:
    Costing(graph).run()
    return graph


def totals(graph: Graph) -> NodeCost:
    """The model's parameters and buffers, every node's; its FLOPs, activations and scores, those
    of the nodes forward calls: the ones an output depends on (a node none does keeps its
    parameters, and is not run)."""
    nodes = [n for n in graph.nodes() if not n.is_input]
    live = graph.ancestors([o.node for o in graph.outputs + graph.objectives])
    costs = [n.meta["cost"] for n in nodes]
    run = [n.meta["cost"] for n in nodes if n.name in live]
    return NodeCost(sum(c.params for c in costs), sum(c.flops for c in run),
                    sum(c.activation_bytes for c in run), sum(c.buffer_bytes for c in costs),
                    sum(c.score_bytes for c in run))
