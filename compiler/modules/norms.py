"""The norms a sub-layer or a norm node uses: LayerNorm (with an offset: Nemotron's LayerNorm1P,
scaled by offset + weight), RMSNorm computed as Hugging Face's Llama does it (in float32, the
weight applied after casting back), or RMSNorm with an offset computed as Hugging Face's Gemma
does it (in float32 times (offset + weight), then cast back); or an affine map per channel that
normalises nothing (MobileBERT's NoNorm, ResMLP's Affine)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (no mean, no bias)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class OffsetRMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * (offset + weight) over the last dimension, in float32 (Gemma's
    RMSNorm with offset 1). The weight starts at 1 - offset: the scale starts at 1."""

    def __init__(self, dim, eps=1e-6, offset=1.0):
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.full((dim,), 1.0 - offset))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (self.offset + self.weight.float())).to(x.dtype)


class ChannelAffine(nn.Module):
    """x * weight + bias over the channels: the last axis, or an image's axis 1 (`image`)."""

    def __init__(self, channels: int, bias: bool = True, image: bool = False):
        super().__init__()
        self.image = image
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None

    def forward(self, x):
        shape = (-1, 1, 1) if self.image else (-1,)  # [C] -> [C, 1, 1] against an image's [B, C, H, W]
        x = x * self.weight.view(shape)
        return x + self.bias.view(shape) if self.bias is not None else x


class OffsetLayerNorm(nn.LayerNorm):
    """A LayerNorm scaled by (offset + weight) (Nemotron's LayerNorm1P: offset 1); the weight
    starts at 1 - offset, the scale at 1. The state dict holds the weight as stored (w, not 1 + w)."""

    def __init__(self, normalized_shape, eps=1e-5, offset=1.0, bias=True):
        super().__init__(normalized_shape, eps=eps, bias=bias)
        self.offset = offset
        nn.init.constant_(self.weight, 1.0 - offset)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight + self.offset, self.bias, self.eps)


def norm_module(kind: str, width: int, eps: float, offset: float = 0.0, bias: bool = True,
                affine: bool = True) -> nn.Module:
    """A LayerNorm (`layer`, with a bias or without, or with neither weight nor bias: not `affine`)
    or an RMSNorm (`rms`) over `width` channels, either with an `offset` (Nemotron's LayerNorm1P,
    Gemma's RMSNorm); or `affine`, x * weight + bias alone (MobileBERT's NoNorm)."""
    if kind == "affine":
        return ChannelAffine(width, bias=bias)
    if not affine:  # OLMo's LayerNorm
        return nn.LayerNorm(width, eps=eps, elementwise_affine=False)
    if kind == "rms" and offset:
        return OffsetRMSNorm(width, eps, offset)
    if kind == "rms":
        return RMSNorm(width, eps)
    if offset:
        return OffsetLayerNorm(width, eps=eps, offset=offset, bias=bias)
    return nn.LayerNorm(width, eps=eps) if bias else nn.LayerNorm(width, eps=eps, bias=False)


def zero_scale(norm: nn.Module) -> None:
    """Make a norm output zeros (Swin v2's res_post norms: every block starts as the identity)."""
    if norm.weight is None:  # a LayerNorm without weight: nothing to zero
        return
    nn.init.constant_(norm.weight, -getattr(norm, "offset", 0.0))
    if getattr(norm, "bias", None) is not None:
        nn.init.zeros_(norm.bias)
