"""relative_lookup: a table's entry for every (query, key) pair of tokens on an H x W grid, picked
by the pair's 2-D offset: the learned relative position biases of Swin, BEiT (without the class
token) and LeViT, written as a `param` (the table) and this lookup, whatever the attention around
it is written from. It reads the table [1, ..., R] (its last axis the rows, one per offset) and
gives [1, ..., Nq, Nk] (a param [heads, R] gives the score bias [1, heads, N, N]):

    - {id: table, param: {shape: [4, 196], init: zeros}}                      # [1, 4, 196]
    - {id: bias, from: table, relative_lookup: {grid: [14, 14], offsets: absolute}}  # [1, 4, 196, 196]

Offsets are query minus key, (Δrow, Δcol) (`order: key_minus_query`, TensorFlow's MaxViT, reads
the signed table in reverse):
- signed (the default): (Δrow + H - 1)(2W - 1) + Δcol + W - 1, a table of (2H - 1)(2W - 1) rows
  (Swin's and BEiT's relative_position_index);
- absolute: |Δrow| W + |Δcol|, a table of H W rows (LeViT's attention_bias_idxs).
`stride: s` puts the queries on every s-th row and column from the first (LeViT's
AttentionDownsample): ceil(H/s) ceil(W/s) queries, the keys all H W tokens. The index is fixed
(a buffer, not saved); the lookup costs it and no FLOPs.
"""

from __future__ import annotations

from typing import Literal

from ...core.declared import Field
from ...core.suggestions import Remedy
from ...core.types import DTYPE_BYTES, TensorType, tensor
from ..base import Cost, Op, Params, PositiveInt, PositiveSize, RuleError, size_pair
from ..registry import register
from ..dtypes import READS, ANY
from ..decoding import Mixes, register_decoding


class RelativeLookupParams(Params):
    grid: PositiveSize = Field(description="the token grid the pairs lie on: an int (square), or [H, W]")
    offsets: Literal["signed", "absolute"] = Field(
        "signed", description="signed: (2H-1)(2W-1) rows, Swin's and BEiT's order; absolute: H W rows, |Δrow| W + |Δcol|")
    stride: PositiveInt = Field(1, description="queries on every stride-th row and column (LeViT's downsampling "
                                               "attention: 2)")
    order: Literal["query_minus_key", "key_minus_query"] = Field(
        "query_minus_key", description="signed offsets: query minus key (Swin, BEiT) or key minus query (TensorFlow's "
                                       "MaxViT, timm's RelPosBiasTf): the table read in reverse")


def table_rows(p) -> int:
    """How many offsets, the table's last axis."""
    h, w = size_pair(p.grid)
    return (2 * h - 1) * (2 * w - 1) if p.offsets == "signed" else h * w


def pair_counts(p) -> tuple[int, int]:
    """(queries, keys)."""
    h, w = size_pair(p.grid)
    return -(-h // p.stride) * -(-w // p.stride), h * w


class RelativeLookupOp(Op):
    """table [1, ..., R] -> [1, ..., Nq, Nk], R the offsets of the grid."""

    primitive = "relative_lookup"

    def one_grid(self, p) -> str | None:
        return "a relative position index"
    Params = RelativeLookupParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (table,) = inputs
        h, w = size_pair(p.grid)
        if p.stride > max(h, w):
            raise RuleError(f"stride {p.stride} is larger than the {h}x{w} grid", field="stride")
        rows = table_rows(p)
        if len(table.shape) < 2 or table.dtype != "float32" or table.shape[-1] != rows:
            raise RuleError(f"relative_lookup over a {h}x{w} grid with {p.offsets} offsets reads a table of {rows} "
                            f"rows on its last axis, got {table.describe()}", field="from",
                            hint=Remedy(f"e.g. a param: {{shape: [heads, {rows}]}}, one bias per head and offset"))
        if p.offsets == "absolute" and "order" in p.model_fields_set:
            raise RuleError("absolute offsets are the same in either order", field="order",
                            hint=Remedy("drop order; it turns signed offsets"))
        queries, keys = pair_counts(p)
        return tensor((*table.shape[:-1], queries, keys))  # [1, ..., R] -> [1, ..., Nq, Nk]

    def cost(self, p, inputs, out, ctx) -> Cost:
        queries, keys = pair_counts(p)
        return Cost(0, 0, buffer_bytes=queries * keys * DTYPE_BYTES["int64"])


RELATIVE_LOOKUP = register(RelativeLookupOp())
READS.register(RELATIVE_LOOKUP, ANY)
register_decoding(RELATIVE_LOOKUP, Mixes("its table is made for every pair of tokens"))
