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


CHUNK = 1 << 18  # elements of a block of query rows: its one temporary (absolute offsets) is this small


def pair_offset_index(h: int, w: int, offsets: str = "signed", stride: int = 1, out=None) -> torch.Tensor:
    """[Nq, Nk] int64: the row of each (query, key) pair, queries on every stride-th row and column
    (written into `out` when given). Computed in place a block of query rows at a time, so that
    building it takes the index itself and at most one temporary of CHUNK elements, not several
    [Nq, Nk] int64 tensors (a 96x96 grid's index is 680 MB; its temporaries were 2 GB more)."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")  # 2 x [H, W]
    key_rows, key_cols = rows.flatten(), cols.flatten()  # 2 x [Nk], row-major
    query_rows, query_cols = rows[::stride, ::stride].flatten(), cols[::stride, ::stride].flatten()  # 2 x [Nq]
    queries, keys = query_rows.numel(), key_rows.numel()
    index = torch.empty(queries, keys, dtype=torch.long) if out is None else out  # [Nq, Nk]
    step = max(1, CHUNK // max(keys, 1))
    for start in range(0, queries, step):
        block = slice(start, start + step)
        rows_out = index[block]  # [rows, Nk], a view: computed in place
        torch.sub(query_rows[block, None], key_rows[None, :], out=rows_out)  # Δrow, in -(H-1)..H-1
        if offsets == "absolute":  # |Δrow| · W + |Δcolumn|, in 0..HW-1
            rows_out.abs_().mul_(w).add_((query_cols[block, None] - key_cols[None, :]).abs_())
        else:  # (Δrow + H - 1) · (2W - 1) + Δcolumn + W - 1, in 0..(2H-1)(2W-1)-1
            rows_out.add_(h - 1).mul_(2 * w - 1).add_(query_cols[block, None]).sub_(key_cols[None, :]).add_(w - 1)
    return index


class RelativeLookup(nn.Module):
    def __init__(self, grid, offsets="signed", stride=1, order="query_minus_key"):
        super().__init__()
        index = pair_offset_index(*grid, offsets, stride)  # [Nq, Nk]
        if order == "key_minus_query":  # the offset negated: row R - 1 - i of the signed table
            index = torch.sub((2 * grid[0] - 1) * (2 * grid[1] - 1) - 1, index, out=index)
        self.register_buffer("index", index, persistent=False)  # [Nq, Nk]

    def forward(self, table):
        return table[..., self.index]  # [1, ..., R] -> [1, ..., Nq, Nk]


@lowering(RELATIVE_LOOKUP)
def lower(p, inputs, ctx):
    order = {"order": p.order} if p.order != "query_minus_key" else {}  # model.py as before without it
    return make(RelativeLookup, grid=size_pair(p.grid), offsets=p.offsets, stride=p.stride, **order)


register_facts(RELATIVE_LOOKUP, grid=KEEPS, classifier=None, resample=None)
