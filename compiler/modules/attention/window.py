"""attention kind=window (torch): attention inside windows of the grid, with a relative
position bias (Swin v1 table, Swin v2 continuous bias) and optionally scaled cosine
attention; kind=shifted (shifted.py) is the same module with a cyclic shift and its mask.

The position bias and the shift mask go into SDPA as one additive 4-D mask, with the biases of
any score parts (scores/, e.g. decomposed relative positions, computed from each window's
queries) added to it.

Padding (`pad: true`, SAM): the grid is padded at the bottom and the right with zero tokens to a
multiple of the window. One zero token is appended to the (normed) tokens and the window order
points every padded place at it; the inverse order reads back only the real tokens (the crop).

No roll and no partition: the cyclic shift and the window partition are one fixed permutation
of the tokens, so the body gathers its input once into window order (`order`, a constant
index: then each window is a contiguous run of tokens) and attention's output once back
(`inverse`). Two gathers replace the four copies of roll, partition, reverse and roll (for
unshifted windows, the two copies of partition and reverse). The residual add stays in grid
order, next to the following LayerNorm, where ONNX Runtime fuses the two
(SkipLayerNormalization). In eager CPU inference the combined mask is computed once per batch
size and kept (it depends only on parameters; see common.eager_inference).

Converter note (TensorRT, dynamic batch): the per-window mask is broadcast to the batch with
`expand`, never `repeat` (a repeat by a symbolic batch does not convert); see
tests/backends/test_tensorrt.py::test_window_mask_uses_expand. The gathers export as
aten.index_select, which TensorRT converts (no aten.roll is left).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.window import WINDOW, padded_grid

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ...weights.resample import bias_table_of
from ..common import Linear, cached, eager_inference, make, tensor_key, trunc_normal_linears, without_cache
from ..relative_lookup import pair_offset_index
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout, common_args, merge_heads
from .form import AttentionForm, written_attention
from .scores.base import install_score_parts, score_part_names

LOGIT_SCALE_MAX = math.log(1.0 / 0.01)  # Swin v2 clamps the cosine logit scale at 100


def log_spaced_coords(wh: int, ww: int, pretrained: int = 0):
    """Swin v2's [1, 2wh-1, 2ww-1, 2] table of log-spaced relative coordinates."""
    h = torch.arange(-(wh - 1), wh, dtype=torch.float32)
    w = torch.arange(-(ww - 1), ww, dtype=torch.float32)
    table = torch.stack(torch.meshgrid(h, w, indexing="ij")).permute(1, 2, 0).contiguous().unsqueeze(0)
    norm_h, norm_w = (pretrained - 1, pretrained - 1) if pretrained > 0 else (wh - 1, ww - 1)
    table[:, :, :, 0] /= norm_h
    table[:, :, :, 1] /= norm_w
    table *= 8  # to [-8, 8]
    return torch.sign(table) * torch.log2(torch.abs(table) + 1.0) / math.log2(8)


def shift_mask(grid, window, shift):
    """[nW, 1, A, A] additive mask: -100 between tokens that came from different regions."""
    (H, W), (wh, ww), (sh, sw) = grid, window, shift
    regions = torch.zeros(H, W)
    count = 0
    for hs in ((0, -wh), (-wh, -sh), (-sh, None)):
        for ws in ((0, -ww), (-ww, -sw), (-sw, None)):
            regions[hs[0]:hs[1], ws[0]:ws[1]] = count
            count += 1
    windows = regions.view(H // wh, wh, W // ww, ww).permute(0, 2, 1, 3).reshape(-1, wh * ww)  # [nW, A]
    mask = windows[:, None, :] - windows[:, :, None]  # [nW, A, A]
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)[:, None]  # [nW, 1, A, A]


class TablePositionBias(nn.Module):
    """Swin v1: a learned table of biases per relative offset and head."""

    def __init__(self, window, heads):
        super().__init__()
        wh, ww = window
        self.table = nn.Parameter(torch.zeros((2 * wh - 1) * (2 * ww - 1), heads))
        self.register_buffer("index", pair_offset_index(wh, ww), persistent=False)
        nn.init.trunc_normal_(self.table, std=0.02)

    def forward(self):
        area = self.index.shape[0]
        return self.table[self.index.view(-1)].view(area, area, -1).permute(2, 0, 1).contiguous()  # [h, A, A]


class ContinuousPositionBias(nn.Module):
    """Swin v2: biases from a small MLP over log-spaced coordinates, squashed to (0, 16)."""

    def __init__(self, window, heads, hidden=512, pretrained=0):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, heads, bias=False))
        self.register_buffer("coords", log_spaced_coords(window[0], window[1], pretrained), persistent=False)
        self.register_buffer("index", pair_offset_index(*window), persistent=False)
        trunc_normal_linears(self)

    def forward(self):
        area = self.index.shape[0]
        table = self.mlp(self.coords).view(-1, self.mlp[2].out_features)  # [(2wh-1)(2ww-1), h]
        bias = table[self.index.view(-1)].view(area, area, -1).permute(2, 0, 1).contiguous()  # [h, A, A]
        return 16 * torch.sigmoid(bias)


def window_partition(x, wh: int, ww: int):
    """[B, H, W, C] -> [B*nW, wh*ww, C]"""
    B, H, W, C = x.shape
    x = x.view(B, H // wh, wh, W // ww, ww, C).permute(0, 1, 3, 2, 4, 5)  # [B, H/wh, W/ww, wh, ww, C]
    return x.reshape(-1, wh * ww, C)


def window_order(grid, window, shift, padded=None):
    """[Hp*Wp] index: for each place in window order (windows row by row, the tokens of a window
    row by row, after the cyclic shift by -shift), the token of the row-major grid it holds;
    places of the `padded` grid (Hp, Wp) outside the grid hold H*W, a zero token appended after
    the grid's tokens."""
    (H, W), (wh, ww), (sh, sw) = grid, window, shift
    Hp, Wp = padded if padded is not None else grid
    index = torch.arange(H * W).view(1, H, W, 1)
    if (Hp, Wp) != (H, W):
        index = F.pad(index, (0, 0, 0, Wp - W, 0, Hp - H), value=H * W)  # [1, H, W, 1] -> [1, Hp, Wp, 1]
    if sh or sw:
        index = torch.roll(index, shifts=(-sh, -sw), dims=(1, 2))
    return window_partition(index, wh, ww).flatten()


def inverse_order(order, tokens: int):
    """[tokens] index: where each token of the grid stands in window order (the padding places,
    all holding index `tokens`, sort after the real ones and are left out: the crop)."""
    return torch.argsort(order, stable=True)[:tokens]


def window_reverse(windows, wh: int, ww: int, H: int, W: int):
    """[B*nW, wh*ww, C] -> [B, H, W, C]"""
    C = windows.shape[-1]
    x = windows.view(-1, H // wh, W // ww, wh, ww, C).permute(0, 1, 3, 2, 4, 5)  # [B, H/wh, wh, W/ww, ww, C]
    return x.reshape(-1, H, W, C)


class WindowAttention(AttentionForm, Sublayer):
    """kind=window / shifted: attention inside windows of the grid, after an optional cyclic
    shift (timm Swin / SwinV2 WindowAttention and the block's roll and partition)."""

    def __init__(self, dim, heads, grid, window, shift=(0, 0), bias="table", cosine=False, qkv_bias=True,
                 proj_bias=True, cpb_hidden=512, pretrained_window=0, attn_drop=0.0, proj_drop=0.0, padded=None,
                 score_parts=(), external_queries=False, merge_heads="head_major", pad_before_norm=False,
                 score_bias=False, **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.attn_drop = heads, attn_drop
        self.grid, self.window, self.shift = tuple(grid), tuple(window), tuple(shift)
        self.padded = tuple(padded) if padded is not None and tuple(padded) != self.grid else None
        self.score_parts = tuple(score_parts)  # children of these names, installed after construction
        self.score_bias = score_bias  # False, or reads a bias [1 (shared) or B (per_sample), h or 1, A, A] last
        self.pad_before_norm = pad_before_norm  # TinyViT: the norm after the padding, in the body
        self.merge_heads = merge_heads  # head_major: (heads, head_dim), as timm's Swin; dim_major: NesT
        self.external_queries = external_queries  # GC ViT: queries read as an input, keys and values projected
        if external_queries:
            self.kv = Linear(dim, 2 * dim, bias=qkv_bias is True)
        else:
            self.qkv = Linear(dim, 3 * dim, bias=qkv_bias is True)
        if qkv_bias == "qv":  # Swin v2: biases for queries and values only
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.register_buffer("k_bias", torch.zeros(dim), persistent=False)
            self.v_bias = nn.Parameter(torch.zeros(dim))
        else:
            self.q_bias = None
        self.proj = Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        self.logit_scale = nn.Parameter(torch.full((heads, 1, 1), math.log(10.0))) if cosine else None
        if bias == "table":
            self.position_bias = TablePositionBias(self.window, heads)
        elif bias == "cpb":
            self.position_bias = ContinuousPositionBias(self.window, heads, cpb_hidden, pretrained_window)
        else:
            self.position_bias = None
        mask = shift_mask(self.grid, self.window, self.shift) if any(self.shift) else None
        self.register_buffer("shift_mask", mask, persistent=False)
        order = window_order(self.grid, self.window, self.shift, self.padded)
        if self.padded is None and torch.equal(order, torch.arange(order.numel())):  # one unshifted window, or
            self.order = self.inverse = None                                           # windows one row high
        else:
            self.register_buffer("order", order, persistent=False)  # window order <- grid order
            tokens = self.grid[0] * self.grid[1]
            self.register_buffer("inverse", inverse_order(order, tokens), persistent=False)  # grid <- window order
        trunc_normal_linears(self.kv if external_queries else self.qkv)
        trunc_normal_linears(self.proj)

    def attn_mask(self, batch):
        """One additive mask: position bias [h, A, A] plus shift mask [nW, 1, A, A]."""
        mask = self.position_bias() if self.position_bias is not None else None
        if self.shift_mask is None:  # 4-D: SDPA's CPU kernel takes a slow path for a 3-D mask
            return mask[None] if mask is not None else None  # [1, h, A, A]
        if mask is None:
            mask = self.shift_mask.expand(-1, self.heads, -1, -1)
        else:
            mask = mask[None] + self.shift_mask  # [nW, h, A, A]
        area = mask.shape[-1]
        return mask.expand(batch, -1, -1, -1, -1).reshape(-1, self.heads, area, area)  # [B*nW, h, A, A]

    def mask_for(self, x):
        """attn_mask for a batch of x; in eager inference computed once per batch size and dtype."""
        batch = x.shape[0]
        if not eager_inference(self, x):
            return self.attn_mask(batch)
        sources = list(self.position_bias.parameters()) if self.position_bias is not None else []
        key = tensor_key(*sources, self.shift_mask)
        return cached(self, "mask", None if key is None else (batch, x.dtype, key), lambda: self.attn_mask(batch))

    def project_qkv(self, x):
        if self.q_bias is None:
            return self.qkv(x)
        return self.qkv.activate(x, bias=torch.cat((self.q_bias, self.k_bias, self.v_bias)))

    def body(self, x, *extra):
        """[B, N, C] -> [B, N, C], tokens in grid order; `extra`: the external queries [B, A, C]
        when the node reads them."""
        queries = extra[0] if self.external_queries else None
        bias = extra[-1] if self.score_bias else None
        if self.padded is not None:
            x = F.pad(x, (0, 0, 0, 1))  # [B, N, C] -> [B, N+1, C]: the zero token the padding places read
        if self.pad_before_norm:
            x = self.norm(x)  # TinyViT: the padding token normed too
        if self.order is None:
            return self.windowed(x, queries, bias)
        return self.windowed(x.index_select(1, self.order), queries, bias).index_select(1, self.inverse)  # via window order

    def with_score_bias(self, mask, bias, batch):
        """The mask plus a score bias [1, h or 1, A, A] (shared by every window of every sample) or
        [B, h or 1, A, A] (per sample: expanded to its windows, [B*nW, h or 1, A, A]; expand, not
        repeat, so that a dynamic batch converts in TensorRT)."""
        if self.score_bias == "per_sample":
            _, h, A, _ = bias.shape
            windows = self.padded or self.grid
            count = (windows[0] // self.window[0]) * (windows[1] // self.window[1])
            bias = bias[:, None].expand(batch, count, -1, -1, -1).reshape(-1, h, A, A)  # [B, h, A, A] -> [B*nW, h, A, A]
        return bias if mask is None else mask + bias

    def normed_body(self, x, *extra):
        """The body after the pre-norm, or with `pad_before_norm` the body alone: it norms after
        padding."""
        if self.pad_before_norm:
            return self.body(x, *extra)
        return super().normed_body(x, *extra)

    def part_bias(self, q, k, mask):
        """The attention mask plus the score parts' biases ([B*nW, h, A, A] each), or the mask."""
        for name in self.score_parts:
            bias = getattr(self, name).bias(q, k)  # [B*nW, h, A, A]
            mask = bias if mask is None else mask + bias
        return mask

    def split_qkv(self, x, queries=None):
        """q, k, v [B*nW, h, A, d] of x [B, N, C] in window order; external queries [B, A, C] are
        shared by the windows of their sample (GC ViT's q_global.repeat_interleave)."""
        B, N, C = x.shape
        heads, area = self.heads, self.window[0] * self.window[1]
        if queries is None:
            qkv = self.project_qkv(x).reshape(-1, area, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
            return qkv.unbind(0)  # 3 x [B*nW, h, A, d]
        kv = self.kv(x).reshape(-1, area, 2, heads, C // heads).permute(2, 0, 3, 1, 4)  # [2, B*nW, h, A, d]
        k, v = kv.unbind(0)
        q = queries.reshape(B, 1, area, heads, C // heads).expand(-1, N // area, -1, -1, -1)  # [B, nW, A, h, d]
        return q.reshape(-1, area, heads, C // heads).transpose(1, 2), k, v  # [B*nW, h, A, d]

    def windowed(self, x, queries=None, bias=None):
        """Attention within each window, the tokens in window order: [B, N, C] -> [B, N, C]; `bias`:
        an additive score bias [1 or B, h or 1, A, A] (score_bias)."""
        B, N, C = x.shape
        area = self.window[0] * self.window[1]
        q, k, v = self.split_qkv(x, queries)  # [B*nW, h, A, d]
        scale = None
        if self.logit_scale is not None:  # scaled cosine attention
            q = F.normalize(q, dim=-1) * torch.clamp(self.logit_scale, max=LOGIT_SCALE_MAX).exp()
            k = F.normalize(k, dim=-1)
            scale = 1.0
        mask = self.part_bias(q, k, self.mask_for(x))
        if bias is not None:
            mask = self.with_score_bias(mask, bias, B)  # [B*nW or 1, h, A, A]
        if self.writes_out(area, q):
            x = written_attention(q, k, v, mask, scale=scale, dropout=attention_dropout(self))  # [B*nW, h, A, d]
        else:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=attention_dropout(self), scale=scale)
        if self.merge_heads == "head_major":
            x = self.proj(x.transpose(1, 2).reshape(B, N, C))  # [B*nW, h, A, d] -> [B, N, C]
        else:
            x = self.proj(merge_heads(x, self.merge_heads).reshape(B, N, C))  # [B*nW, h, A, d] -> [B, N, C]
        if self.proj_drop is not None:
            x = self.proj_drop(x)
        return x

    def __getstate__(self):
        return without_cache(self.__dict__)


def window_module(op, p, x, inputs=None):
    """The WindowAttention of a window or shifted node (its op gives the geometry), with its
    score parts installed."""
    window, shift = op.geometry(p, x.grid)
    extra = {}  # only what the node uses, so that model.py reads as before for Swin
    if p.pad:
        extra["padded"] = padded_grid(p, x.grid)
    if p.pad == "before_norm":
        extra["pad_before_norm"] = True
    if p.score_bias:
        extra["score_bias"] = "shared" if inputs[-1].shape[0] == 1 else "per_sample"
    if p.scores:
        extra["score_parts"] = score_part_names(p)
    if p.queries == "external":
        extra["external_queries"] = True
    if p.merge_heads != "head_major":
        extra["merge_heads"] = p.merge_heads
    module = make(WindowAttention, grid=x.grid, window=window, shift=shift, bias=p.bias, cosine=p.cosine,
                  cpb_hidden=p.cpb_hidden, pretrained_window=p.pretrained_window, **extra,
                  **common_args(p, x.channels), **sublayer_args(p))
    return install_score_parts(module, p, op.score_site(p, inputs or [x]))


@lowering(WINDOW)
def lower(p, inputs, ctx):
    return window_module(WINDOW, p, inputs[0], inputs)


def bias_table(module) -> dict:
    """RESAMPLE: a relative-position bias table (v1) made for another window is resampled to this
    one's; the continuous position bias (v2) has none."""
    if not isinstance(module.position_bias, TablePositionBias):
        return {}
    return {"position_bias.table": bias_table_of(module.window)}


register_facts(WINDOW, grid=KEEPS, classifier=None, resample=bias_table)
