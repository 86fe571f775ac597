"""score part decomposed (torch): the additive bias q · R_h[Δrow] + q · R_w[Δcolumn] over the
site's grid (MViTv2, SAM; timm's get_decomposed_rel_pos_bias with equal query and key sizes, and
mvitv2's cal_rel_pos_type where the keys lie on a grid of their own), computed from the queries,
so the attention stays one fused SDPA with it as attn_mask."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.decomposed import DECOMPOSED

from ...common import make
from .base import score_module


def offset_index(size: int, key_size: int | None = None):
    """[size, key_size] index into a table of 2 * max(size, key_size) - 1 offsets: entry (i, j) is
    i - j + size - 1 on one grid, and timm's cal_rel_pos_type between two (the coarser side's
    index scaled up to the finer one's, in float32, truncated)."""
    key_size = size if key_size is None else key_size
    query_ratio, key_ratio = max(key_size / size, 1.0), max(size / key_size, 1.0)
    distance = (torch.arange(size)[:, None] * query_ratio
                - torch.arange(key_size)[None, :] * key_ratio)  # [size, key_size], float32
    distance += (key_size - 1) * key_ratio
    return distance.long()  # [size, key_size]


class DecomposedPositions(nn.Module):
    """Learned tables of the row and column offsets of a grid (`rel_pos_h` [2H-1, d],
    `rel_pos_w` [2W-1, d], shared by the heads; zeros at first, as SAM); between a query grid and
    another key grid, 2 * max(query side, key side) - 1 offsets each (MViTv2)."""

    def __init__(self, grid, head_dim, key_grid=None):
        super().__init__()
        self.grid = tuple(grid)
        self.key_grid = tuple(key_grid) if key_grid is not None else self.grid
        (h, w), (key_h, key_w) = self.grid, self.key_grid
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * max(h, key_h) - 1, head_dim))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * max(w, key_w) - 1, head_dim))
        self.register_buffer("index_h", offset_index(h, key_h), persistent=False)
        self.register_buffer("index_w", offset_index(w, key_w), persistent=False)

    def bias(self, q, k):
        """q [B, h, N, d] (N = H*W, row-major) -> the additive bias [B, h, N, M] (M = K_h*K_w)."""
        B, heads, N, d = q.shape
        h, w = self.grid
        rows = self.rel_pos_h[self.index_h]  # [H, K_h, d]: the table at each (query row, key row)
        cols = self.rel_pos_w[self.index_w]  # [W, K_w, d]
        grid_q = q.reshape(B * heads, h, w, d)  # [B, h, N, d] -> [B*h, H, W, d]
        rel_h = torch.einsum("bhwc,hkc->bhwk", grid_q, rows)  # [B*h, H, W, K_h]
        rel_w = torch.einsum("bhwc,wkc->bhwk", grid_q, cols)  # [B*h, H, W, K_w]
        bias = rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]  # [B*h, H, W, K_h, K_w]
        return bias.reshape(B, heads, N, -1)  # [B*h, H, W, K_h, K_w] -> [B, h, N, M]


@score_module(DECOMPOSED)
def make_decomposed(p, site):
    key_grid = {} if site.key_grid is None else {"key_grid": site.key_grid}  # make's args as before on one grid
    return make(DecomposedPositions, grid=site.grid, head_dim=site.head_dim, **key_grid)
