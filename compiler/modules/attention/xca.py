"""attention kind=xca (torch): XCiT's cross-covariance attention, as timm's XCA: q and k
L2-normalised over the tokens (F.normalize's eps), q times the learned temperature, then one
F.scaled_dot_product_attention at scale 1 over the heads transposed (timm's fused path; its
default path multiplies the products by the temperature instead: the same weights to rounding)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.xca import XCA

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make
from ..sublayer import sublayer_args
from .channel import ChannelAttention
from .common import common_args


class CrossCovarianceAttention(ChannelAttention):
    """kind=xca: per head, softmax(q^ k^T temperature) over the head's d channels mixes v's."""

    def __init__(self, dim, heads, **options):
        super().__init__(dim, heads, **options)
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))  # [h, 1, 1]

    def attend(self, q, k, v):
        """[B, h, d, N] each -> [B, h, d, N]."""
        q = F.normalize(q, dim=-1) * self.temperature
        return self.channel_attention(q, F.normalize(k, dim=-1), v, 1.0)


@lowering(XCA)
def lower(p, inputs, ctx):
    return make(CrossCovarianceAttention, **common_args(p, inputs[0].channels), **sublayer_args(p))


register_facts(XCA, grid=KEEPS, classifier=None, resample=None)
