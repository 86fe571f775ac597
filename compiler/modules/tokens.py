"""tokens (torch): learned tokens inserted among the prefix."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.tokens import TOKENS

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class LearnedTokens(nn.Module):
    """cat(x[:, :at], tokens, x[:, at:]) along the sequence."""

    def __init__(self, dim, count=1, at=0):
        super().__init__()
        self.at = at
        self.tokens = nn.Parameter(torch.zeros(1, count, dim))
        nn.init.normal_(self.tokens, std=1e-6)  # timm's init of class tokens

    def forward(self, x):
        tokens = self.tokens.expand(x.shape[0], -1, -1)  # [B, count, C]
        if self.at == 0:
            return torch.cat([tokens, x], dim=1)  # [B, count + N, C]
        return torch.cat([x[:, : self.at], tokens, x[:, self.at:]], dim=1)


@lowering(TOKENS)
def lower(p, inputs, ctx):
    return make(LearnedTokens, dim=inputs[0].channels, count=p.count, at=p.at)


register_facts(TOKENS, grid=KEEPS, classifier=None, resample=None)
