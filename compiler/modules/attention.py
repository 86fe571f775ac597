"""attention (torch): one module per kind, all computing through
F.scaled_dot_product_attention. Relative position biases and shift masks go in as one
additive attn_mask; the causal mask is SDPA's is_causal. Buffers that depend only on shapes
(relative-position index, coordinates table, shift mask) are built here, once.

Converter note (TensorRT, dynamic batch): the per-window mask is broadcast to the batch with
`expand`, never `repeat` (a repeat by a symbolic batch does not convert); see
tests/test_tensorrt.py::test_window_mask_uses_expand.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..primitives.attention import window_geometry
from .common import Emitter, emit_sublayer, make, register_lowering, trunc_normal_linears

LOGIT_SCALE_MAX = math.log(1.0 / 0.01)  # Swin v2 clamps the cosine logit scale at 100


def attention_dropout(module: nn.Module) -> float:
    return module.attn_drop if module.training else 0.0


def init_conv_fan_out(conv: nn.Conv2d) -> None:
    """PVT's init for convolutions: normal with std sqrt(2 / fan_out), zero bias."""
    fan_out = conv.kernel_size[0] * conv.kernel_size[1] * conv.out_channels // conv.groups
    nn.init.normal_(conv.weight, std=math.sqrt(2.0 / fan_out))
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)


class SelfAttention(nn.Module):
    """kind=global: every token attends to every token (timm ViT Attention)."""

    causal = False

    def __init__(self, dim, heads, qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.heads, self.attn_drop = heads, attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        trunc_normal_linears(self)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)  # [3, B, h, N, d]
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=attention_dropout(self), is_causal=self.causal)
        x = self.proj(x.transpose(1, 2).reshape(B, N, C))  # [B, h, N, d] -> [B, N, C]
        return self.proj_drop(x) if self.proj_drop is not None else x


class CausalSelfAttention(SelfAttention):
    """kind=causal: token i attends to tokens 0..i."""

    causal = True


class CrossAttention(nn.Module):
    """kind=cross: queries from x, keys and values from `memory`."""

    def __init__(self, dim, heads, qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.heads, self.attn_drop = heads, attn_drop
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        trunc_normal_linears(self)

    def forward(self, x, memory):
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.heads, C // self.heads).transpose(1, 2)  # [B, h, N, d]
        kv = self.kv(memory).reshape(B, memory.shape[1], 2, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)  # [B, h, M, d]
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=attention_dropout(self))
        x = self.proj(x.transpose(1, 2).reshape(B, N, C))  # -> [B, N, C]
        return self.proj_drop(x) if self.proj_drop is not None else x


# -- spatial reduction (PVT) --------------------------------------------------------------------


class SpatialReductionAttention(nn.Module):
    """kind=sra: keys/values from the grid reduced by conv(k = s = R) + LayerNorm (PVT)."""

    def __init__(self, dim, heads, grid, sr_ratio=1, sr_eps=1e-5, qkv_bias=True, proj_bias=True, attn_drop=0.0,
                 proj_drop=0.0):
        super().__init__()
        self.heads, self.attn_drop = heads, attn_drop
        self.grid = tuple(grid) if grid else None
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, sr_ratio, sr_ratio)
            self.sr_norm = nn.LayerNorm(dim, eps=sr_eps)
        else:
            self.sr, self.sr_norm = None, None
        trunc_normal_linears(self)
        if self.sr is not None:
            init_conv_fan_out(self.sr)

    def reduce(self, x):
        if self.sr is None:
            return x
        h, w = self.grid
        x = x.transpose(1, 2).reshape(x.shape[0], -1, h, w)  # [B, N, C] -> [B, C, H, W]
        x = self.sr(x).flatten(2).transpose(1, 2)  # -> [B, HW/R^2, C]
        return self.sr_norm(x)

    def forward(self, x):
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.heads, C // self.heads).transpose(1, 2)  # [B, h, N, d]
        kv = self.kv(self.reduce(x)).reshape(B, -1, 2, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)  # [B, h, M, d]
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=attention_dropout(self))
        x = self.proj(x.transpose(1, 2).reshape(B, N, C))  # -> [B, N, C]
        return self.proj_drop(x) if self.proj_drop is not None else x


class LinearSpatialReductionAttention(SpatialReductionAttention):
    """kind=linear_sra: keys/values from avg-pool to PxP, 1x1 conv, LayerNorm, GELU (PVT v2-li)."""

    def __init__(self, dim, heads, grid, pool=7, sr_eps=1e-5, qkv_bias=True, proj_bias=True, attn_drop=0.0,
                 proj_drop=0.0):
        super().__init__(dim, heads, grid, 1, sr_eps, qkv_bias, proj_bias, attn_drop, proj_drop)
        self.pool = nn.AdaptiveAvgPool2d(pool)
        self.sr = nn.Conv2d(dim, dim, 1, 1)
        self.sr_norm = nn.LayerNorm(dim, eps=sr_eps)
        self.act = nn.GELU()
        init_conv_fan_out(self.sr)

    def reduce(self, x):
        h, w = self.grid
        x = x.transpose(1, 2).reshape(x.shape[0], -1, h, w)  # [B, N, C] -> [B, C, H, W]
        x = self.sr(self.pool(x)).flatten(2).transpose(1, 2)  # -> [B, P*P, C]
        return self.act(self.sr_norm(x))


# -- windows (Swin) ----------------------------------------------------------------------------


def relative_position_index(wh: int, ww: int):
    """[A, A] index into the (2wh-1)(2ww-1) table of relative offsets (A = wh*ww)."""
    coords = torch.stack(torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij")).flatten(1)  # [2, A]
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)  # [A, A, 2]
    rel[:, :, 0] += wh - 1
    rel[:, :, 1] += ww - 1
    rel[:, :, 0] *= 2 * ww - 1
    return rel.sum(-1)


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
        self.register_buffer("index", relative_position_index(wh, ww), persistent=False)
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
        self.register_buffer("index", relative_position_index(*window), persistent=False)
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


def window_reverse(windows, wh: int, ww: int, H: int, W: int):
    """[B*nW, wh*ww, C] -> [B, H, W, C]"""
    C = windows.shape[-1]
    x = windows.view(-1, H // wh, W // ww, wh, ww, C).permute(0, 1, 3, 2, 4, 5)  # [B, H/wh, wh, W/ww, ww, C]
    return x.reshape(-1, H, W, C)


class WindowAttention(nn.Module):
    """kind=window / shifted: attention inside windows of the grid, after an optional cyclic
    shift (timm Swin / SwinV2 WindowAttention and the block's roll and partition)."""

    def __init__(self, dim, heads, grid, window, shift=(0, 0), bias="table", cosine=False, qkv_bias=True,
                 proj_bias=True, cpb_hidden=512, pretrained_window=0, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.heads, self.attn_drop = heads, attn_drop
        self.grid, self.window, self.shift = tuple(grid), tuple(window), tuple(shift)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias is True)
        if qkv_bias == "qv":  # Swin v2: biases for queries and values only
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.register_buffer("k_bias", torch.zeros(dim), persistent=False)
            self.v_bias = nn.Parameter(torch.zeros(dim))
        else:
            self.q_bias = None
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
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
        trunc_normal_linears(self.qkv)
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

    def project_qkv(self, x):
        if self.q_bias is None:
            return self.qkv(x)
        return F.linear(x, self.qkv.weight, torch.cat((self.q_bias, self.k_bias, self.v_bias)))

    def forward(self, x):
        B, N, C = x.shape
        (H, W), (wh, ww), (sh, sw) = self.grid, self.window, self.shift
        area, heads = wh * ww, self.heads
        x = x.view(B, H, W, C)  # [B, N, C] -> [B, H, W, C]
        if sh or sw:
            x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        windows = window_partition(x, wh, ww)  # -> [B*nW, A, C]
        qkv = self.project_qkv(windows).reshape(-1, area, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # [B*nW, h, A, d]
        scale = None
        if self.logit_scale is not None:  # scaled cosine attention
            q = F.normalize(q, dim=-1) * torch.clamp(self.logit_scale, max=LOGIT_SCALE_MAX).exp()
            k = F.normalize(k, dim=-1)
            scale = 1.0
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=self.attn_mask(B), dropout_p=attention_dropout(self),
                                           scale=scale)
        x = self.proj(x.transpose(1, 2).reshape(-1, area, C))  # [B*nW, h, A, d] -> [B*nW, A, C]
        if self.proj_drop is not None:
            x = self.proj_drop(x)
        x = window_reverse(x, wh, ww, H, W)  # -> [B, H, W, C]
        if sh or sw:
            x = torch.roll(x, shifts=(sh, sw), dims=(1, 2))
        return x.reshape(B, N, C)  # -> [B, N, C]


# -- lowering ------------------------------------------------------------------------------------


def module_for(p, x):
    common = dict(dim=x.channels, heads=p.heads, qkv_bias=p.qkv_bias, proj_bias=p.proj_bias, attn_drop=p.attn_drop,
                  proj_drop=p.proj_drop)
    if p.kind in ("window", "shifted"):
        window, shift = window_geometry(p, x.grid)
        return make(WindowAttention, grid=x.grid, window=window, shift=shift, bias=p.bias, cosine=p.cosine,
                    cpb_hidden=p.cpb_hidden, pretrained_window=p.pretrained_window, **common)
    if p.kind == "sra":
        return make(SpatialReductionAttention, grid=x.grid, sr_ratio=p.sr_ratio, sr_eps=p.sr_eps, **common)
    if p.kind == "linear_sra":
        return make(LinearSpatialReductionAttention, grid=x.grid, pool=p.pool, sr_eps=p.sr_eps, **common)
    cls = {"global": SelfAttention, "causal": CausalSelfAttention, "cross": CrossAttention}[p.kind]
    return make(cls, **common)


@register_lowering("attention")
def lower(node, inputs, emit: Emitter, args):
    body = module_for(node.params, inputs[0])
    return emit_sublayer(emit, body, node.params, inputs[0].channels, *args)
