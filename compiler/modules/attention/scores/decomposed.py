"""score part decomposed (torch): the additive bias q · R_h[Δrow] + q · R_w[Δcolumn] over the
site's grid (MViTv2, SAM; timm's get_decomposed_rel_pos_bias with equal query and key sizes),
computed from the queries, so the attention stays one fused SDPA with it as attn_mask."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.decomposed import DECOMPOSED

from ...common import make
from .base import score_module


def offset_index(size: int):
    """[size, size] index into a table of 2*size - 1 offsets: entry (i, j) is i - j + size - 1."""
    positions = torch.arange(size)
    return positions[:, None] - positions[None, :] + (size - 1)  # [size, size]


class DecomposedPositions(nn.Module):
    """Learned tables of the row and column offsets of a grid (`rel_pos_h` [2H-1, d],
    `rel_pos_w` [2W-1, d], shared by the heads; zeros at first, as SAM)."""

    def __init__(self, grid, head_dim):
        super().__init__()
        self.grid = tuple(grid)
        h, w = self.grid
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * h - 1, head_dim))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * w - 1, head_dim))
        self.register_buffer("index_h", offset_index(h), persistent=False)
        self.register_buffer("index_w", offset_index(w), persistent=False)

    def bias(self, q, k):
        """q [B, h, N, d] (N = H*W, row-major) -> the additive bias [B, h, N, N]."""
        B, heads, N, d = q.shape
        h, w = self.grid
        rows = self.rel_pos_h[self.index_h]  # [H, H, d]: the table at each (query row, key row)
        cols = self.rel_pos_w[self.index_w]  # [W, W, d]
        grid_q = q.reshape(B * heads, h, w, d)  # [B, h, N, d] -> [B*h, H, W, d]
        rel_h = torch.einsum("bhwc,hkc->bhwk", grid_q, rows)  # [B*h, H, W, H]
        rel_w = torch.einsum("bhwc,wkc->bhwk", grid_q, cols)  # [B*h, H, W, W]
        bias = rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]  # [B*h, H, W, H, W]
        return bias.reshape(B, heads, N, N)  # [B*h, H, W, H, W] -> [B, h, N, N]


@score_module(DECOMPOSED)
def make_decomposed(p, site):
    return make(DecomposedPositions, grid=site.grid, head_dim=site.head_dim)
