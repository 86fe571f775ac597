"""gather (torch): tokens (or values) at the positions an index gives, per sample.

x[rows, index] with rows = arange(B)[:, None] is torch.gather(x, 1, index expanded over the
channels) (MAE's form), written as indexing because torch-tensorrt converts aten.index with a
dynamic batch and has no such converter for aten.gather."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.gather import GATHER

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Gather(nn.Module):
    """Each sample's tokens (or values) at its indices along the sequence, after `prefix`
    tokens kept in front; `count` takes the first indices only."""

    def __init__(self, count=None, prefix=0):
        super().__init__()
        self.count, self.prefix = count, prefix

    def forward(self, x, index):
        if self.count is not None:
            index = index[:, :self.count]  # [B, M] -> [B, count]
        rows = torch.arange(x.shape[0], device=x.device).unsqueeze(1)  # [B, 1]
        if not self.prefix:
            return x[rows, index]  # [B, N, C] -> [B, M, C], or [B, N] -> [B, M]
        picked = x[:, self.prefix:][rows, index]  # [B, M, C]
        return torch.cat([x[:, :self.prefix], picked], dim=1)  # [B, P + M, C]


@lowering(GATHER)
def lower(p, inputs, ctx):
    return make(Gather, count=p.count, prefix=inputs[0].prefix)


register_facts(GATHER, grid=KEEPS, classifier=None, resample=None)  # the output has no grid
