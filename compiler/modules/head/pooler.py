"""head kind=pooler (torch): act(fc(x[:, index])) (BERT's pooler)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.head.pooler import POOLER

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make, trunc_normal_linears


class Pooler(nn.Module):
    def __init__(self, dim, index=0, act="tanh"):
        super().__init__()
        self.index, self.act = index, act
        self.fc = nn.Linear(dim, dim)
        trunc_normal_linears(self)

    def forward(self, x):
        x = self.fc(x[:, self.index])  # [B, N, C] -> [B, C]
        return torch.tanh(x) if self.act == "tanh" else x


@lowering(POOLER)
def lower(p, inputs, ctx):
    return make(Pooler, dim=inputs[0].channels, index=p.index, act=p.act)


register_facts(POOLER, grid=KEEPS, classifier=None, resample=None)
