"""norm kind=group (torch): nn.GroupNorm over an image [B, C, H, W]; over tokens [B, N, C] the
same with the tokens as its places (transposed to [B, C, N] and back), so the state dict holds
torch's names (weight, bias)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.norm.group import GROUP

from ...facts import FEATURE_NORM, KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class TokenGroupNorm(nn.GroupNorm):
    """nn.GroupNorm over tokens [B, N, C]: each group's channels of every token of a sample."""

    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)  # [B, N, C] -> [B, C, N] -> [B, N, C]


@lowering(GROUP)
def lower(p, inputs, ctx):
    x = inputs[0]
    kind = TokenGroupNorm if x.layout == "tokens" else nn.GroupNorm
    return make(kind, num_groups=p.groups, num_channels=x.channels, eps=p.eps)


register_facts(GROUP, grid=KEEPS, classifier=None, resample=None)
FEATURE_NORM.register(GROUP, True)
