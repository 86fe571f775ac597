"""attention kind=channel (torch): DaViT's channel group attention, as timm's ChannelAttention.

timm computes softmax((k s)^T v) [d, d] and applies it to q^T; that is attention with the roles
moved and the heads transposed: queries k^T, keys v^T and values q^T, each [B, h, d, N] (d
"tokens" of N "channels"), so one F.scaled_dot_product_attention call computes it (ONNX writes
one Attention op, TensorRT converts one op). xca.py subclasses it with XCiT's roles, its
normalisation and its temperature."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.channel import CHANNEL

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import Linear, make, trunc_normal_linears
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout, common_args
from .form import AttentionForm, written_attention


class ChannelAttention(AttentionForm, Sublayer):
    """kind=channel: per head, softmax(k^T v / sqrt(d)) over the head's d channels mixes q's."""

    def __init__(self, dim, heads, qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0, **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.attn_drop = heads, attn_drop
        self.scale = (dim // heads) ** -0.5
        self.qkv = Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        trunc_normal_linears(self)

    def heads_transposed(self, x):
        """[B, N, C] -> q, k, v, each [B, h, d, N]: every head's channels as rows over the tokens."""
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads)  # [B, N, C] -> [B, N, 3, h, d]
        return qkv.permute(2, 0, 3, 4, 1).unbind(0)  # -> 3 x [B, h, d, N]

    def attend(self, q, k, v):
        """[B, h, d, N] each -> [B, h, d, N]: timm's (softmax(k^T v s) q^T): queries k, keys v, values q."""
        return self.channel_attention(k, v, q, self.scale)

    def channel_attention(self, queries, keys, values, scale):
        """softmax(queries keys^T scale) values over [B, h, d, N] rows: one fused kernel."""
        dropout = attention_dropout(self)
        if self.writes_out(queries.shape[-2], queries):
            return written_attention(queries, keys, values, scale=scale, dropout=dropout)
        return F.scaled_dot_product_attention(queries, keys, values, dropout_p=dropout, scale=scale)

    def body(self, x):
        B, N, C = x.shape
        mixed = self.attend(*self.heads_transposed(x))  # [B, h, d, N]
        x = mixed.permute(0, 3, 1, 2).reshape(B, N, C)  # -> [B, N, h, d] -> [B, N, C]
        x = self.proj(x)
        return self.proj_drop(x) if self.proj_drop is not None else x


@lowering(CHANNEL)
def lower(p, inputs, ctx):
    return make(ChannelAttention, **common_args(p, inputs[0].channels), **sublayer_args(p))


register_facts(CHANNEL, grid=KEEPS, classifier=None, resample=None)
