"""attention kind=pooled (torch): multi-head pooling attention with its MViTv2 sub-layer (timm
mvitv2.py MultiScaleAttention, mode conv, and the attention half of MultiScaleBlock).

q, k and v [B, h, N, d] from one linear; each pooled on the grid by a depthwise conv shared by
the heads (the heads folded into the batch) and a LayerNorm; one fused SDPA over the pooled grids
with the score parts' bias (decomposed relative positions) as its attn_mask; the pooled queries
added back (residual pooling); the projection. The residual is the input, projected from the
normed input where the width changes and max-pooled on the grid where stride_q > 1."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.pooled import POOLED, pools

from ...facts import register_facts
from ...lowering_rules import lowering
from ..common import LayerScale, Linear, make, trunc_normal_linears
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout, common_args
from .form import AttentionForm, written_attention
from .scores.base import install_score_parts, score_part_names


class GridPool(nn.Module):
    """One pooling of q, k or v: a depthwise conv (no bias) of head_dim channels, shared by the
    heads, and a LayerNorm over each head's channels (timm's pool_q / norm_q)."""

    def __init__(self, head_dim, kernel, stride, eps):
        super().__init__()
        self.conv = nn.Conv2d(head_dim, head_dim, kernel, stride=stride, padding=kernel // 2, groups=head_dim,
                              bias=False)
        self.norm = nn.LayerNorm(head_dim, eps=eps)

    def forward(self, t, grid):
        B, heads, _, d = t.shape
        t = t.reshape(B * heads, grid[0], grid[1], d).permute(0, 3, 1, 2)  # [B, h, H*W, d] -> [B*h, d, H, W]
        t = self.conv(t)  # -> [B*h, d, H/s, W/s]
        t = t.reshape(B, heads, d, -1).transpose(2, 3)  # -> [B, h, H/s * W/s, d]
        return self.norm(t)


class PooledAttention(AttentionForm, Sublayer):
    """kind=pooled: q, k, v pooled on the grid, attention over the pooled grids, residual pooling;
    the sub-layer's residual projected and max-pooled to the output's width and grid (MViTv2)."""

    def __init__(self, dim, heads, grid, dim_out, kernel=3, stride_q=1, stride_kv=1, pool_q=True, pool_kv=True,
                 pool_eps=1e-6, residual_pooling=True, qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0,
                 score_parts=(), **sublayer):
        super().__init__(dim, **sublayer)
        if self.layer_scale is not None:  # the branch is dim_out wide
            self.layer_scale = LayerScale(dim_out, self.layer_scale.gamma[0].item())
        self.heads, self.head_dim, self.dim_out, self.attn_drop = heads, dim_out // heads, dim_out, attn_drop
        self.grid = tuple(grid)
        self.score_parts = tuple(score_parts)  # children of these names, installed after construction
        self.residual_pooling = residual_pooling
        self.qkv = Linear(dim, 3 * dim_out, bias=qkv_bias)
        self.pool_q = GridPool(self.head_dim, kernel, stride_q, pool_eps) if pool_q else None
        self.pool_k = GridPool(self.head_dim, kernel, stride_kv, pool_eps) if pool_kv else None
        self.pool_v = GridPool(self.head_dim, kernel, stride_kv, pool_eps) if pool_kv else None
        self.proj = Linear(dim_out, dim_out, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        self.shortcut_proj = Linear(dim, dim_out) if dim != dim_out and self.residual else None
        self.shortcut_pool = (nn.MaxPool2d(stride_q + 1, stride_q, (stride_q + 1) // 2)
                              if stride_q > 1 and self.residual else None)
        trunc_normal_linears(self)

    def pooled(self, t, pool):
        return t if pool is None else pool(t, self.grid)  # [B, h, N, d] -> [B, h, N', d]

    def position_bias(self, q, k):
        """The score parts' additive biases ([B, h, Nq, Nk]), or None."""
        bias = None
        for name in self.score_parts:
            b = getattr(self, name).bias(q, k)  # [B, h, Nq, Nk]
            bias = b if bias is None else bias + b
        return bias

    def body(self, x):
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # -> [3, B, h, N, d]
        q, k, v = qkv.unbind(0)  # [B, h, N, d] each
        q = self.pooled(q, self.pool_q)  # -> [B, h, Nq, d]
        k, v = self.pooled(k, self.pool_k), self.pooled(v, self.pool_v)  # -> [B, h, Nk, d]
        bias = self.position_bias(q, k)
        if self.writes_out(k.shape[-2], q):
            out = written_attention(q, k, v, mask=bias, dropout=attention_dropout(self))  # [B, h, Nq, d]
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                                 dropout_p=attention_dropout(self))  # [B, h, Nq, d]
        if self.residual_pooling:
            out = out + q
        out = self.proj(out.transpose(1, 2).reshape(B, q.shape[-2], self.dim_out))  # -> [B, Nq, dim_out]
        return self.proj_drop(out) if self.proj_drop is not None else out

    def shortcut(self, x, normed):
        """The residual: x, projected from the normed input where the width changes (MViTv2 takes
        the normed input there), max-pooled on the grid where the queries are strided."""
        x = x if self.shortcut_proj is None else self.shortcut_proj(normed)  # [B, N, C] -> [B, N, dim_out]
        if self.shortcut_pool is None:
            return x
        B, _, C = x.shape
        image = x.reshape(B, self.grid[0], self.grid[1], C).permute(0, 3, 1, 2)  # -> [B, C, H, W]
        return self.shortcut_pool(image).flatten(2).transpose(1, 2)  # -> [B, H/s * W/s, C]

    def forward(self, x):
        normed = self.norm(x) if self.norm is not None else x
        branch = self.branch(self.body(normed))
        return self.scaled_shortcut(self.shortcut(x, normed)) + branch if self.residual else branch


@lowering(POOLED)
def lower(p, inputs, ctx):
    x = inputs[0]
    module = make(PooledAttention, grid=x.grid, dim_out=POOLED.out_width(p, x), kernel=p.kernel, stride_q=p.stride_q,
                  stride_kv=p.stride_kv, pool_q=pools(p.kernel, p.stride_q), pool_kv=pools(p.kernel, p.stride_kv),
                  pool_eps=p.pool_eps, residual_pooling=p.residual_pooling,
                  score_parts=score_part_names(p), **common_args(p, x.channels), **sublayer_args(p))
    return install_score_parts(module, p, POOLED.score_site(p, inputs))


def pooled_grid(p, grid):
    """TOKEN_GRID: the output lies on the query grid, the input's divided by stride_q."""
    return (grid[0] // p.stride_q, grid[1] // p.stride_q)  # (H, W) -> (H/s, W/s)


def relative_tables(module) -> dict:
    """RESAMPLE: decomposed relative-position tables made for other grids are resampled to this
    module's lengths by linear interpolation along the offsets (timm mvitv2's checkpoint_filter_fn)."""
    found = {}
    for name in module.score_parts:
        part = getattr(module, name)
        for table in ("rel_pos_h", "rel_pos_w"):
            if hasattr(part, table):
                found[f"{name}.{table}"] = table_resampler(getattr(part, table).shape[0])
    return found


def table_resampler(length: int):
    return lambda table: resample_table(table, length)


def resample_table(table, length: int):
    """[L, d] -> [length, d], linear along the offsets, as timm's checkpoint_filter_fn."""
    if table.shape[0] == length:
        return table
    line = table.reshape(1, table.shape[0], -1).permute(0, 2, 1)  # [L, d] -> [1, d, L]
    line = F.interpolate(line.float(), size=length, mode="linear")  # -> [1, d, length]
    return line.reshape(-1, length).permute(1, 0).to(table.dtype)  # -> [length, d]


register_facts(POOLED, grid=pooled_grid, classifier=None, resample=relative_tables)
