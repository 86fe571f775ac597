"""attention kind=convolutional (torch): CvT's convolutional projection attention, as Hugging
Face's CvtSelfAttention and CvtSelfOutput: each of q, k and v a depthwise conv (no bias) and a
BatchNorm over the token grid (the keys and values strided), the class tokens joined after the
convolutions, linear maps, one F.scaled_dot_product_attention at CvT's scale, the projection."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.convolutional import CONVOLUTIONAL

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import Linear, grid_as_image, image_as_tokens, make, trunc_normal_linears
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout, common_args
from .form import AttentionForm, written_attention


class DepthwiseConvNorm(nn.Module):
    """A depthwise kernel x kernel convolution without bias (padding kernel // 2) and a
    BatchNorm: CvT's "dw_bn" projection of an image [B, C, H, W]."""

    def __init__(self, dim, kernel, stride, eps):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim, kernel, stride=stride, padding=kernel // 2, groups=dim, bias=False)
        self.norm = nn.BatchNorm2d(dim, eps=eps)

    def forward(self, image):
        return self.norm(self.conv(image))  # [B, C, H, W] -> [B, C, h, w]


class ConvolutionalAttention(AttentionForm, Sublayer):
    """kind=convolutional: q, k, v each a depthwise conv + BatchNorm of the grid, then a linear map."""

    def __init__(self, dim, heads, grid, prefix=0, kernel_size=3, stride_kv=2, scale=None, bn_eps=1e-5,
                 qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0, **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.attn_drop, self.grid, self.prefix = heads, attn_drop, tuple(grid), prefix
        self.scale = dim**-0.5 if scale is None else scale  # CvT's: the width's, not the head's
        self.conv_q = DepthwiseConvNorm(dim, kernel_size, 1, bn_eps)
        self.conv_k = DepthwiseConvNorm(dim, kernel_size, stride_kv, bn_eps)
        self.conv_v = DepthwiseConvNorm(dim, kernel_size, stride_kv, bn_eps)
        self.q = Linear(dim, dim, bias=qkv_bias)
        self.k = Linear(dim, dim, bias=qkv_bias)
        self.v = Linear(dim, dim, bias=qkv_bias)
        self.proj = Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        trunc_normal_linears(self)

    def projected(self, conv, linear, image, cls):
        """[B, C, H, W] -> [B, h, M, d]: the conv's tokens after the class tokens, the linear map, the heads."""
        x = image_as_tokens(conv(image))  # -> [B, M - prefix, C]
        if cls is not None:
            x = torch.cat((cls, x), dim=1)  # -> [B, M, C]
        B, M, C = x.shape
        return linear(x).reshape(B, M, self.heads, C // self.heads).transpose(1, 2)  # -> [B, h, M, d]

    def body(self, x):
        B, N, C = x.shape
        cls, patches = (x[:, : self.prefix], x[:, self.prefix:]) if self.prefix else (None, x)  # [B, P, C], [B, HW, C]
        image = grid_as_image(patches, self.grid)  # -> [B, C, H, W]
        q, k, v = (self.projected(conv, linear, image, cls)
                   for conv, linear in ((self.conv_q, self.q), (self.conv_k, self.k), (self.conv_v, self.v)))
        if self.writes_out(k.shape[-2], q):
            x = written_attention(q, k, v, scale=self.scale, dropout=attention_dropout(self))  # [B, h, N, d]
        else:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=attention_dropout(self), scale=self.scale)
        x = self.proj(x.transpose(1, 2).reshape(B, N, C))  # [B, h, N, d] -> [B, N, C]
        return self.proj_drop(x) if self.proj_drop is not None else x


@lowering(CONVOLUTIONAL)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(ConvolutionalAttention, grid=x.grid, prefix=x.prefix, kernel_size=p.kernel_size,
                stride_kv=p.stride_kv, scale=p.scale, bn_eps=p.bn_eps, **common_args(p, x.channels), **sublayer_args(p))


register_facts(CONVOLUTIONAL, grid=KEEPS, classifier=None, resample=None)
