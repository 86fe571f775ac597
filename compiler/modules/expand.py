"""expand (torch): Tensor.expand to sizes that are numbers, the input's own, or `like`'s."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.expand import EXPAND, sources

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Expand(nn.Module):
    """x.expand(sizes): each size -1 (x's own), a number, or ("like", axis), the size of that
    axis of `like` at run time (a SymInt while exporting)."""

    def __init__(self, sizes):
        super().__init__()
        self.sizes = tuple(tuple(s) if isinstance(s, (tuple, list)) else s for s in sizes)

    def forward(self, x, like=None):
        sizes = [like.shape[s[1]] if isinstance(s, tuple) else s for s in self.sizes]
        return x.expand(sizes)  # [1, 1, C] -> [B, L, C]: a view, nothing copied

    def extra_repr(self) -> str:
        return "sizes=[" + ", ".join(f"like.shape[{s[1]}]" if isinstance(s, tuple) else str(s)
                                     for s in self.sizes) + "]"


@lowering(EXPAND)
def lower(p, inputs, ctx):
    like = inputs[1] if len(inputs) > 1 else None
    return make(Expand, sizes=sources(p, inputs[0], like, ctx.graph.dims))


register_facts(EXPAND, grid=KEEPS, classifier=None, resample=None)
