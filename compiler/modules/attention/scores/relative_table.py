"""score part relative_table (torch): a learned bias per head for each 2-D offset on the grid,
plus BEiT's class-token rows, looked up by a fixed index into the additive bias [1, h, N, N]
(timm's beit Attention._get_rel_pos_bias), so the attention stays one fused SDPA with it as
attn_mask. The names are timm's: `relative_position_bias_table` (a parameter) and
`relative_position_index` (a buffer, not saved: timm's is not persistent either)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.relative_table import RELATIVE_TABLE

from ...common import make
from ...relative_lookup import pair_offset_index
from .base import score_module


def grid_offset_index(h: int, w: int, class_tokens: bool):
    """[N, N] rows of the table for every (query, key) pair, N = H*W (+ 1 with a class token in
    front): the grid's offsets (Δrow + H - 1) · (2W - 1) + (Δcolumn + W - 1), then BEiT's rows
    class -> token, token -> class, class -> class after the (2H - 1)(2W - 1) offsets."""
    if not class_tokens:
        return pair_offset_index(h, w)  # [H*W, H*W], relative_lookup's signed offsets
    distances = (2 * h - 1) * (2 * w - 1)
    index = torch.empty(h * w + 1, h * w + 1, dtype=torch.long)  # [N, N], the class token first
    pair_offset_index(h, w, out=index[1:, 1:])  # the grid's offsets written in place: no [H*W, H*W] copy
    index[0, :] = distances  # the class token's query: class -> token
    index[:, 0] = distances + 1  # every query's look at the class token: token -> class
    index[0, 0] = distances + 2  # class -> class
    return index


class RelativeTable(nn.Module):
    """The table [rows, heads] (zeros at first, as BEiT) and its fixed [N, N] index."""

    def __init__(self, grid, heads, class_tokens=True):
        super().__init__()
        h, w = grid
        rows = (2 * h - 1) * (2 * w - 1) + (3 if class_tokens else 0)  # offsets, then the class rows
        self.relative_position_bias_table = nn.Parameter(torch.zeros(rows, heads))
        self.register_buffer("relative_position_index", grid_offset_index(h, w, class_tokens), persistent=False)

    def bias(self, q, k):
        """The additive bias [1, h, N, N] (the same for every sample; q and k are not read)."""
        n = self.relative_position_index.shape[0]
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]  # [N*N, h]
        bias = bias.view(n, n, -1).permute(2, 0, 1)  # [N*N, h] -> [h, N, N]
        return bias.unsqueeze(0)  # [1, h, N, N]


@score_module(RELATIVE_TABLE)
def make_relative_table(p, site):
    return make(RelativeTable, grid=tuple(site.grid), heads=site.heads, class_tokens=p.class_tokens)
