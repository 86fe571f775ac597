"""What the attention modules share: dropout on the attention weights only in training,
PVT's convolution init, the heads' merge, the constructor arguments every kind takes, and which
modules generate() hands a key/value cache (`takes_cache`)."""

from __future__ import annotations

import math

import torch.nn as nn


def attention_dropout(module: nn.Module) -> float:
    return module.attn_drop if module.training else 0.0


def init_conv_fan_out(conv: nn.Conv2d) -> None:
    """PVT's init for convolutions: normal with std sqrt(2 / fan_out), zero bias."""
    fan_out = conv.kernel_size[0] * conv.kernel_size[1] * conv.out_channels // conv.groups
    nn.init.normal_(conv.weight, std=math.sqrt(2.0 / fan_out))
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)


def merge_heads(x, order: str):
    """The heads' outputs [B, h, N, d] -> [B, N, h*d]: head_major concatenates each head's d
    channels, dim_major each channel's h heads (NesT's permute(0, 2, 3, 4, 1))."""
    B, h, N, d = x.shape
    if order == "dim_major":
        return x.permute(0, 2, 3, 1).reshape(B, N, d * h)  # [B, h, N, d] -> [B, N, d, h] -> [B, N, d*h]
    return x.transpose(1, 2).reshape(B, N, h * d)  # [B, h, N, d] -> [B, N, h, d] -> [B, N, h*d]


def common_args(p, width: int) -> dict:
    """The constructor arguments of every attention module."""
    return dict(dim=width, heads=p.heads, qkv_bias=p.qkv_bias, proj_bias=p.proj_bias, attn_drop=p.attn_drop,
                proj_drop=p.proj_drop)


def takes_cache(module) -> bool:
    """Whether generate() hands `module`'s forward a KVCache (`cache`): an attention body whose
    `takes_cache` says so (self-attention whose mask rule decodes, latent attention)."""
    return bool(getattr(module, "takes_cache", False))
