"""select (torch): one token, x[:, index]."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.select import SELECT

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Select(nn.Module):
    def __init__(self, index=0):
        super().__init__()
        self.index = index

    def forward(self, x):
        return x[:, self.index]  # [B, N, C] -> [B, C]


@lowering(SELECT)
def lower(p, inputs, ctx):
    return make(Select, index=p.index)


register_facts(SELECT, grid=KEEPS, classifier=None, resample=None)
