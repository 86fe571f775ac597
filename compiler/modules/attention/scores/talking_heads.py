"""score part talking_heads (torch): the heads' scores mixed by `proj_l` before the softmax and
the weights by `proj_w` after it, both h x h linears over the head axis (timm TalkingHeadAttn)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.attention.scores.talking_heads import TALKING_HEADS

from ...common import make
from .base import score_module


class TalkingHeads(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.proj_l = nn.Linear(heads, heads)
        self.proj_w = nn.Linear(heads, heads)

    def before_softmax(self, scores):
        return self.proj_l(scores.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # [B, h, N, M], mixed over h

    def after_softmax(self, weights):
        return self.proj_w(weights.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # [B, h, N, M], mixed over h


@score_module(TALKING_HEADS)
def make_talking_heads(p, site):
    return make(TalkingHeads, heads=site.heads)
