"""attention kind=linear_sra (torch): keys and values from an average pool to PxP, a 1x1
convolution, a LayerNorm and a GELU (timm pvt_v2, linear=True)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.attention.linear_sra import LINEAR_SRA

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import Conv2d, grid_as_image, image_as_tokens, make
from ..sublayer import sublayer_args
from .common import common_args, init_conv_fan_out
from .sra import SpatialReductionAttention


class LinearSpatialReductionAttention(SpatialReductionAttention):
    """kind=linear_sra: keys/values from avg-pool to PxP, 1x1 conv, LayerNorm, GELU (PVT v2-li)."""

    def __init__(self, dim, heads, grid, pool=7, sr_eps=1e-5, qkv_bias=True, proj_bias=True, attn_drop=0.0,
                 proj_drop=0.0, **sublayer):
        super().__init__(dim, heads, grid, 1, sr_eps, qkv_bias, proj_bias, attn_drop, proj_drop, **sublayer)
        self.pool = nn.AdaptiveAvgPool2d(pool)
        self.sr = Conv2d(dim, dim, 1, 1)
        self.sr_norm = nn.LayerNorm(dim, eps=sr_eps)
        self.act = nn.GELU()
        init_conv_fan_out(self.sr)

    def reduce(self, x):
        x = grid_as_image(x, self.grid)  # [B, N, C] -> [B, C, H, W], channels-last
        x = image_as_tokens(self.sr(self.pool(x)))  # -> [B, P*P, C]
        return self.act(self.sr_norm(x))


@lowering(LINEAR_SRA)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(LinearSpatialReductionAttention, grid=x.grid, pool=p.pool, sr_eps=p.sr_eps,
                **common_args(p, x.channels), **sublayer_args(p))


register_facts(LINEAR_SRA, grid=KEEPS, classifier=None, resample=None)
