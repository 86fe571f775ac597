"""mask_token (torch): masked tokens replaced by a learned token."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.mask_token import MASK_TOKEN

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class MaskToken(nn.Module):
    """x * (1 - m) + token * m with m the mask (1 = masked) per token (SimMIM)."""

    def __init__(self, dim):
        super().__init__()
        self.token = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.trunc_normal_(self.token, std=0.02)

    def forward(self, x, mask):
        m = mask.flatten(1).unsqueeze(-1).type_as(x)  # [B, H, W] or [B, N] -> [B, N, 1]
        return x * (1.0 - m) + self.token.expand(x.shape[0], x.shape[1], -1) * m


@lowering(MASK_TOKEN)
def lower(p, inputs, ctx):
    return make(MaskToken, dim=inputs[0].channels)


register_facts(MASK_TOKEN, grid=KEEPS, classifier=None, resample=None)
