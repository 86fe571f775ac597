"""attention kind=outlook (torch): VOLO's outlook attention, as timm's OutlookAttention over
tokens [B, N, C] on their (H, W) grid instead of timm's [B, H, W, C] (the same numbers).

The values' k x k neighbourhoods are F.unfold's columns (aten.im2col, which TensorRT and ONNX
convert); they are folded back with compiler/modules/fold.py's `Fold` (one shifted add per
kernel position), not F.fold, whose col2im TensorRT cannot convert with a dynamic batch; the
stride's average pool (timm: AvgPool2d with ceil_mode) is a padded sum over cells scaled by a
constant, for the same reason. The
weights are a plain softmax over k*k values per target place: no fused attention kernel fits
(its "keys" are places of a neighbourhood, not tokens), so ONNX Runtime fuses nothing here."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.outlook import OUTLOOK

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import Linear, grid_as_image, image_as_tokens, make, trunc_normal_linears
from ..fold import Fold
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout


def inverse_count(grid, stride):
    """[h, w, 1]: 1 / the number of the grid's places in each stride x stride cell (the last row and
    column of cells may hang over the grid)."""
    rows, cols = ((n - torch.arange(0, n, stride)).clamp(max=stride) for n in grid)  # [h], [w]
    return (1.0 / (rows[:, None] * cols[None, :]).float())[..., None]


class OutlookAttention(Sublayer):
    """kind=outlook: each place's k x k neighbourhood of values mixed by weights predicted from
    the place (pooled by the stride), folded back onto the grid."""

    def __init__(self, dim, heads, grid, kernel_size=3, padding=1, stride=1, qkv_bias=False, proj_bias=True,
                 attn_drop=0.0, proj_drop=0.0, **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.attn_drop, self.grid = heads, attn_drop, tuple(grid)
        self.kernel_size, self.padding, self.stride = kernel_size, padding, stride
        self.places = tuple(-(-n // stride) for n in self.grid)  # ceil(H / stride), ceil(W / stride)
        self.scale = (dim // heads) ** -0.5
        self.v = Linear(dim, dim, bias=qkv_bias)
        self.attn = Linear(dim, kernel_size**4 * heads)
        self.proj = Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        self.register_buffer("inverse_count", inverse_count(self.grid, stride), persistent=False)  # [h, w, 1]
        self.fold = Fold(self.grid, (kernel_size, kernel_size), (stride, stride), (padding, padding), (1, 1),
                         self.places)
        trunc_normal_linears(self)

    def neighbourhood_values(self, x):
        """[B, N, C] -> [B, h, L, k*k, d]: every place's k x k values, per head."""
        B, _, C = x.shape
        kk, L = self.kernel_size**2, self.places[0] * self.places[1]
        v = grid_as_image(self.v(x), self.grid)  # [B, N, C] -> [B, C, H, W]
        cols = F.unfold(v, self.kernel_size, padding=self.padding, stride=self.stride)  # -> [B, C*k*k, L]
        return cols.reshape(B, self.heads, C // self.heads, kk, L).permute(0, 1, 4, 3, 2)  # -> [B, h, L, k*k, d]

    def pooled(self, x):
        """[B, N, C] -> [B, L, C]: timm's AvgPool2d(stride, ceil_mode=True) over the grid, as a padded
        sum over stride x stride cells times 1 / (the cell's places inside the grid): avg_pool2d with
        ceil_mode has no TensorRT converter with a dynamic batch."""
        if self.stride == 1:
            return x
        B, _, C = x.shape
        (H, W), (h, w), s = self.grid, self.places, self.stride
        x = x.reshape(B, H, W, C)  # [B, N, C] -> [B, H, W, C]
        if h * s != H or w * s != W:
            x = F.pad(x, (0, 0, 0, w * s - W, 0, h * s - H))  # -> [B, h*s, w*s, C], zeros after the grid
        cells = x.reshape(B, h, s, w, s, C).sum(dim=(2, 4))  # -> [B, h, w, C]
        return (cells * self.inverse_count).reshape(B, h * w, C)  # -> [B, L, C]

    def weights(self, x):
        """[B, N, C] -> [B, h, L, k*k, k*k]: per place and head, softmax over the k*k sources for each target."""
        B = x.shape[0]
        kk = self.kernel_size**2
        attn = self.attn(self.pooled(x))  # [B, L, C] -> [B, L, h*k^4]
        attn = attn.reshape(B, -1, self.heads, kk, kk).permute(0, 2, 1, 3, 4)  # -> [B, h, L, k*k, k*k]
        attn = (attn * self.scale).softmax(dim=-1)
        return F.dropout(attn, attention_dropout(self)) if self.attn_drop > 0 else attn

    def body(self, x):
        B, N, C = x.shape
        kk, L = self.kernel_size**2, self.places[0] * self.places[1]
        mixed = self.weights(x) @ self.neighbourhood_values(x)  # [B, h, L, kk, d]
        cols = mixed.permute(0, 1, 4, 3, 2).reshape(B, C * kk, L)  # -> [B, C*k*k, L]
        x = image_as_tokens(self.fold(cols))  # -> [B, C, H, W] -> [B, N, C]
        x = self.proj(x)
        return self.proj_drop(x) if self.proj_drop is not None else x


@lowering(OUTLOOK)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(OutlookAttention, dim=x.channels, heads=p.heads, grid=x.grid, kernel_size=p.kernel_size,
                padding=p.padding, stride=p.stride, qkv_bias=p.qkv_bias, proj_bias=p.proj_bias, attn_drop=p.attn_drop,
                proj_drop=p.proj_drop, **sublayer_args(p))


register_facts(OUTLOOK, grid=KEEPS, classifier=None, resample=None)
