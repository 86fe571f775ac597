"""score part offset_table (torch): LeViT / TinyViT's attention biases, a learned [heads, H·W]
table of absolute 2-D offsets looked up by a fixed [N, N] index into the additive bias
[1, h, N, N], so the attention stays one fused SDPA with it as attn_mask. The names are timm's:
`attention_biases` (a parameter; zeros at first, as timm) and `attention_bias_idxs` (a buffer,
not saved: timm's is not persistent either)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.offset_table import OFFSET_TABLE

from ...common import make
from .base import score_module


def absolute_offset_index(h: int, w: int):
    """[N, N] column of each (query, key) pair, N = H*W row-major: |Δrow| · W + |Δcolumn|, the
    order timm's loop over itertools.product(range(H), range(W)) numbers the offsets in."""
    rows = torch.arange(h).repeat_interleave(w)  # [N]: each token's row
    cols = torch.arange(w).repeat(h)  # [N]: each token's column
    d_row = (rows[:, None] - rows[None, :]).abs()  # [N, N]
    d_col = (cols[:, None] - cols[None, :]).abs()  # [N, N]
    return d_row * w + d_col


class OffsetTable(nn.Module):
    """The table [heads, H·W] and its fixed [N, N] index."""

    def __init__(self, grid, heads):
        super().__init__()
        h, w = grid
        self.attention_biases = nn.Parameter(torch.zeros(heads, h * w))
        self.register_buffer("attention_bias_idxs", absolute_offset_index(h, w), persistent=False)

    def bias(self, q, k):
        """The additive bias [1, h, N, N] (the same for every sample; q and k are not read)."""
        n = self.attention_bias_idxs.shape[0]
        bias = self.attention_biases[:, self.attention_bias_idxs.view(-1)]  # [h, N*N]
        return bias.view(1, -1, n, n)  # [h, N*N] -> [1, h, N, N]


@score_module(OFFSET_TABLE)
def make_offset_table(p, site):
    return make(OffsetTable, grid=tuple(site.grid), heads=site.heads)
