"""to_tokens (torch): [B, C, H, W] -> [B, H*W, C]."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.to_tokens import TO_TOKENS

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import image_as_tokens, make


class ToTokens(nn.Module):
    def forward(self, x):
        return image_as_tokens(x)  # [B, C, H, W] -> [B, H*W, C]


@lowering(TO_TOKENS)
def lower(p, inputs, ctx):
    return make(ToTokens)


register_facts(TO_TOKENS, grid=KEEPS, fusion=None, head=None)
