"""relative_lookup (torch): table[..., index] with a fixed [Nq, Nk] index of each (query, key)
pair's 2-D offset on the grid (a buffer, not saved)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.base import size_pair
from archspec.primitives.ops.relative_lookup import RELATIVE_LOOKUP

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


def pair_offset_index(h: int, w: int, offsets: str = "signed", stride: int = 1) -> torch.Tensor:
    """[Nq, Nk] int64: the row of each (query, key) pair, queries on every stride-th row and column."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")  # 2 x [H, W]
    key_rows, key_cols = rows.flatten(), cols.flatten()  # 2 x [Nk], row-major
    query_rows, query_cols = rows[::stride, ::stride].flatten(), cols[::stride, ::stride].flatten()  # 2 x [Nq]
    d_row = query_rows[:, None] - key_rows[None, :]  # [Nq, Nk], in -(H-1)..H-1
    d_col = query_cols[:, None] - key_cols[None, :]  # [Nq, Nk], in -(W-1)..W-1
    if offsets == "absolute":
        return d_row.abs() * w + d_col.abs()  # [Nq, Nk], in 0..HW-1
    return (d_row + h - 1) * (2 * w - 1) + d_col + w - 1  # [Nq, Nk], in 0..(2H-1)(2W-1)-1


class RelativeLookup(nn.Module):
    def __init__(self, grid, offsets="signed", stride=1):
        super().__init__()
        self.register_buffer("index", pair_offset_index(*grid, offsets, stride), persistent=False)  # [Nq, Nk]

    def forward(self, table):
        return table[..., self.index]  # [1, ..., R] -> [1, ..., Nq, Nk]


@lowering(RELATIVE_LOOKUP)
def lower(p, inputs, ctx):
    return make(RelativeLookup, grid=size_pair(p.grid), offsets=p.offsets, stride=p.stride)


register_facts(RELATIVE_LOOKUP, grid=KEEPS, classifier=None, resample=None)
