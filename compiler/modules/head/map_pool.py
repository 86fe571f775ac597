"""The classify head's `pool: map` (torch): timm's AttentionPoolLatent, as VisionTransformer's
attn_pool (SigLIP). A learned latent query [1, 1, C] attends over the tokens through SDPA, a
projection, then a pre-norm MLP with a residual; its parameters are named as timm's (latent, q,
kv, proj, norm, mlp.fc1, mlp.fc2)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.counting import hidden_width

from ..activations import activation
from ..common import Linear


class MapMlp(nn.Module):
    """fc1, the activation, fc2 (timm's Mlp, named as it)."""

    def __init__(self, dim, hidden, act):
        super().__init__()
        self.fc1, self.act, self.fc2 = Linear(dim, hidden), activation(act), Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class MapPool(nn.Module):
    """Tokens [B, N, C] -> one pooled vector [B, C] (timm's AttentionPoolLatent, pool_type token)."""

    def __init__(self, dim, heads, hidden, eps, act):
        super().__init__()
        self.heads = heads
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))
        self.q, self.kv, self.proj = Linear(dim, dim), Linear(dim, 2 * dim), Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.mlp = MapMlp(dim, hidden, act)
        nn.init.trunc_normal_(self.latent, std=dim ** -0.5)

    def forward(self, x):
        batch, tokens, width = x.shape
        head = width // self.heads
        q = self.q(self.latent).reshape(1, 1, self.heads, head).transpose(1, 2)  # [1, 1, C] -> [1, h, 1, d]
        q = q.expand(batch, -1, -1, -1)  # -> [B, h, 1, d]
        kv = self.kv(x).reshape(batch, tokens, 2, self.heads, head).permute(2, 0, 3, 1, 4)  # -> [2, B, h, N, d]
        x = F.scaled_dot_product_attention(q, kv[0], kv[1])  # -> [B, h, 1, d]
        x = self.proj(x.transpose(1, 2).reshape(batch, 1, width))  # -> [B, 1, C]
        x = x + self.mlp(self.norm(x))
        return x[:, 0]  # [B, 1, C] -> [B, C]


def map_pool_args(p, width: int) -> tuple:
    """MapPool's (heads, hidden, eps, act) from a head's pool_* options (classify's and features')."""
    return p.pool_heads, hidden_width(width, None, p.pool_mlp_ratio), p.pool_eps, p.pool_act
