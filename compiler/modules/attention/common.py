"""What the attention modules share: dropout on the attention weights only in training,
PVT's convolution init, the constructor arguments every kind takes, and the body of the kinds
generate() can decode with, which takes its key/value cache as an argument (`CachedAttention`)."""

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


class CachedAttention:
    """A self-attention kind that generate() can decode with (compiler/generate/): its forward
    takes `cache`, this layer's keys and values so far (compiler/generate/cache.py's KVCache,
    handed to it by the model's decode graph), and then attends through it; without one, the
    kind's own body, unchanged."""

    def body(self, x, *extra, cache=None):
        if cache is None:
            return super().body(x, *extra)
        bias, _ = self.split_extra(extra)  # the cache's mask hides the padded keys
        return cache.attend(self, x, bias, self.parts_tensors(extra))

    def cache_entry(self) -> tuple[int, int, int]:
        """(heads, key width, value width) of what generate caches per token: the key/value heads."""
        return self.kv_heads, self.head_dim, self.head_dim
