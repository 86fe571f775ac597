"""The norms a sub-layer or a norm node uses: LayerNorm, or RMSNorm computed as Hugging Face's
Llama does it (in float32, the weight applied after casting back)."""

from __future__ import annotations

import torch
import torch.nn as nn



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


def norm_module(kind: str, width: int, eps: float) -> nn.Module:
    """A LayerNorm (`layer`) or an RMSNorm (`rms`) over `width` channels."""
    if kind == "rms":
        return RMSNorm(width, eps)
    return nn.LayerNorm(width, eps=eps)
