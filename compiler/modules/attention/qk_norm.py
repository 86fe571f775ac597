"""The attention option qk_norm (torch): each head's queries and keys normalised before the
scores, by a LayerNorm (`layer`, with or without a bias) or an RMSNorm (`rms`, weighing by
`qk_norm_offset` + weight: Gemma's, offset 1), over (`qk_norm_over`):

    head       each head's head_dim values, one weight [head_dim] for every head   Qwen3, Gemma 3
    each_head  each head's head_dim values, a weight per head [heads, head_dim]     Cohere (use_qk_norm)
    all_heads  all heads' values of a token together, weight [heads * head_dim]     OLMo 2, OLMoE

Each takes and gives [B, heads, N, head_dim]; the state dict holds `weight` (and `bias`) in
the shapes above, as the references keep them; `qk_norm_affine: false` holds neither (Llama 4's
L2Norm: the RMS norm alone, in float32)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..norms import OffsetRMSNorm, RMSNorm


class HeadsNorm(nn.Module):
    """qk_norm over each_head or all_heads (see the module docstring), in float32 as the references."""

    def __init__(self, kind: str, over: str, heads: int, head_dim: int, eps: float, bias: bool, offset: float = 0.0,
                 affine: bool = True):
        super().__init__()
        self.kind, self.over, self.eps, self.offset = kind, over, eps, offset
        shape = (heads, head_dim) if over == "each_head" else (heads * head_dim,)
        self.weight = nn.Parameter(torch.full(shape, 1.0 - offset)) if affine else None  # offset + weight: 1 at first
        self.bias = nn.Parameter(torch.zeros(shape)) if kind == "layer" and bias and affine else None

    def forward(self, x):
        B, h, N, d = x.shape
        if self.over == "all_heads":
            x = x.transpose(1, 2).reshape(B, N, h * d)  # [B, h, N, d] -> [B, N, h*d]
        weight, bias = self.weight, self.bias
        if self.over == "each_head" and weight is not None:  # [h, d] -> [h, 1, d]: one row per head, over the tokens
            weight, bias = weight[:, None], bias[:, None] if bias is not None else None
        y = self.normalised(x.float())
        y = y * (self.offset + weight.float()) if weight is not None else y
        y = (y + bias.float() if bias is not None else y).to(x.dtype)
        if self.over == "all_heads":
            y = y.reshape(B, N, h, d).transpose(1, 2)  # [B, N, h*d] -> [B, h, N, d]
        return y

    def normalised(self, x):
        """x over its last dimension, without weight or bias."""
        if self.kind == "rms":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return F.layer_norm(x, x.shape[-1:], eps=self.eps)


def qk_norms(kind: str, over: str, bias: bool, eps: float, heads: int, kv_heads: int, head_dim: int,
             offset: float = 0.0, affine: bool = True):
    """(q_norm, k_norm) of the attention option (None, None for `none`); without `affine`, the
    norm alone, in float32 (Llama 4's L2Norm)."""
    if kind == "none":
        return None, None
    if over != "head" or not affine:
        return (HeadsNorm(kind, over, heads, head_dim, eps, bias, offset, affine),
                HeadsNorm(kind, over, kv_heads, head_dim, eps, bias, offset, affine))
    if kind == "rms" and offset:
        return OffsetRMSNorm(head_dim, eps, offset), OffsetRMSNorm(head_dim, eps, offset)
    if kind == "rms":
        return RMSNorm(head_dim, eps), RMSNorm(head_dim, eps)
    return nn.LayerNorm(head_dim, eps=eps, bias=bias), nn.LayerNorm(head_dim, eps=eps, bias=bias)
