"""attention kind=sra (torch): keys and values from the grid reduced by conv(k = s = R) and a
LayerNorm (PVT v1, timm pvt_v2).

The reduction conv reads the tokens as a channels-last image (a view) and writes channels-last,
which is the reduced tokens again (a view): no transposing copies on either side."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.sra import SRA

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import Conv2d, Linear, grid_as_image, image_as_tokens, make, trunc_normal_linears
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout, common_args, init_conv_fan_out
from .form import AttentionForm, written_attention


class SpatialReductionAttention(AttentionForm, Sublayer):
    """kind=sra: keys/values from the grid reduced by conv(k = s = R) + LayerNorm (PVT)."""

    def __init__(self, dim, heads, grid, sr_ratio=1, sr_eps=1e-5, qkv_bias=True, proj_bias=True, attn_drop=0.0,
                 proj_drop=0.0, **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.attn_drop = heads, attn_drop
        self.grid = tuple(grid) if grid else None
        self.q = Linear(dim, dim, bias=qkv_bias)
        self.kv = Linear(dim, 2 * dim, bias=qkv_bias)
        self.proj = Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        if sr_ratio > 1:
            self.sr = Conv2d(dim, dim, sr_ratio, sr_ratio)
            self.sr_norm = nn.LayerNorm(dim, eps=sr_eps)
        else:
            self.sr, self.sr_norm = None, None
        trunc_normal_linears(self)
        if self.sr is not None:
            init_conv_fan_out(self.sr)

    def reduce(self, x):
        if self.sr is None:
            return x
        x = grid_as_image(x, self.grid)  # [B, N, C] -> [B, C, H, W], channels-last
        x = image_as_tokens(self.sr(x))  # -> [B, HW/R^2, C]
        return self.sr_norm(x)

    def body(self, x):
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.heads, C // self.heads).transpose(1, 2)  # [B, h, N, d]
        kv = self.kv(self.reduce(x)).reshape(B, -1, 2, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)  # [B, h, M, d]
        if self.writes_out(k.shape[-2], q):
            x = written_attention(q, k, v, dropout=attention_dropout(self))  # [B, h, N, d]
        else:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=attention_dropout(self))  # [B, h, N, d]
        x = self.proj(x.transpose(1, 2).reshape(B, N, C))  # -> [B, N, C]
        return self.proj_drop(x) if self.proj_drop is not None else x


@lowering(SRA)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(SpatialReductionAttention, grid=x.grid, sr_ratio=p.sr_ratio, sr_eps=p.sr_eps,
                **common_args(p, x.channels), **sublayer_args(p))


register_facts(SRA, grid=KEEPS, classifier=None, resample=None)
