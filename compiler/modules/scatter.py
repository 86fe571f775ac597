"""scatter (torch): values put at the positions an index gives into a sequence."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.scatter import SCATTER

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Scatter(nn.Module):
    """into.scatter(1, index, x) along the sequence, after `prefix` tokens of `into` kept in
    place; an `into` of batch 1 (a parameter) serves every sample; `count` takes the first
    indices only."""

    def __init__(self, count=None, prefix=0):
        super().__init__()
        self.count, self.prefix = count, prefix

    def forward(self, into, index, x):
        if self.count is not None:
            index = index[:, :self.count]  # [B, M] -> [B, count]
        into = into.expand(x.shape[0], *into.shape[1:])  # [1 or B, N, C] -> [B, N, C]
        if x.dim() == 3:
            index = index.unsqueeze(-1).expand(-1, -1, x.shape[-1])  # [B, M] -> [B, M, C]
        if not self.prefix:
            return into.scatter(1, index, x)  # [B, N, C] or [B, N]
        placed = into[:, self.prefix:].scatter(1, index, x)  # [B, N - P, C]
        return torch.cat([into[:, :self.prefix], placed], dim=1)  # [B, N, C]


@lowering(SCATTER)
def lower(p, inputs, ctx):
    return make(Scatter, count=p.count, prefix=inputs[0].prefix)


register_facts(SCATTER, grid=KEEPS, classifier=None, resample=None)  # the output has the grid of `into`
