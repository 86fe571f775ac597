"""relative_bias: T5's relative position bias, as a node of its own. It reads the stream(s) whose
lengths it spans (queries, and keys when they come from another stream) and gives the additive
score bias [1, heads, N, M] that attention nodes with `bias: true` add to their scores:

    - {id: position_bias, from: embed, relative_bias: {heads: 8, buckets: 32, max_distance: 128}}
    - {id: attn, from: [x, position_bias, attention_mask],
       attention: {kind: global, heads: 8, scale: 1.0, bias: true, padding_mask: true}}

The distance key - query goes into one of `buckets` buckets (T5's `_relative_position_bucket`):
with `bidirectional`, half of them for keys after the query and half for keys before it; in
each half, the first half of the buckets count exact distances 0, 1, ... and the rest
logarithmically wider ranges up to `max_distance`, beyond which every distance shares the last
bucket. A learned table [buckets, heads] gives each bucket one bias per head. One node, read by
every layer of a stack, is how T5 shares the table of its first layer with all the others.
"""

from __future__ import annotations

from ...core.declared import Field
from ...core.suggestions import Remedy
from ...core.types import DTYPE_BYTES, TensorType, dim_value, tensor
from ..base import Cost, Op, Params, PositiveInt, RuleError
from ..registry import register
from ..dtypes import READS, ANY
from ..decoding import POSITIONAL, register_decoding


class RelativeBiasParams(Params):
    heads: PositiveInt = Field(description="attention heads: one bias per head and bucket")
    buckets: PositiveInt = Field(32, description="buckets of relative distance (T5: 32), the rows of the table")
    max_distance: PositiveInt = Field(128, description="distances from this on share the last bucket (T5: 128)")
    bidirectional: bool = Field(True, description="separate buckets for keys before and after the query "
                                                  "(T5's encoder); false: every key after the query shares "
                                                  "bucket 0 (T5's causal decoder)")


def exact_buckets(p: RelativeBiasParams) -> int:
    """How many buckets (per side, with `bidirectional`) count exact distances: T5's max_exact."""
    side = p.buckets // 2 if p.bidirectional else p.buckets
    return side // 2


def reach(p: RelativeBiasParams, longest: int) -> int:
    """The largest |key - query| the module tabulates: the longest distance the lengths allow,
    at most twice max_distance (by then every distance sits in the last bucket of its side)."""
    return min(2 * p.max_distance, max(longest - 1, 0))


def check_stream(t: TensorType, role: str) -> None:
    """A stream the bias spans: tokens of a sequence or ids [B, L]."""
    if t.layout not in ("tokens", "ids"):
        raise RuleError(f"relative_bias reads token sequences (or ids [B, L]) for the lengths it spans; {role} is "
                        f"{t.layout_name()} {t.describe()}", field="from",
                        hint=Remedy("read the embedded tokens (or the ids) of the stream the attention runs over"))
    if t.grid:
        raise RuleError(f"relative_bias measures distances along a 1-D sequence, and {role} lies on a "
                        f"{t.grid[0]}x{t.grid[1]} grid", field="from",
                        hint=Remedy("for image tokens use window attention's relative position table "
                                    "(`bias: table`) or a 2-D score part"))


class RelativeBiasOp(Op):
    """T5's bucketed relative position bias: `from: x` (keys = queries) or `from: [x, keys]` ->
    a float tensor [1, heads, N, M], N and M the two streams' lengths."""

    primitive = "relative_bias"
    Params = RelativeBiasParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "keys")

    def accepts(self, p, count: int) -> bool:
        return count in (1, 2)  # the keys default to the queries' stream

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        for t, role in zip(inputs, ("the query stream", "the key stream")):
            check_stream(t, role)
        if p.bidirectional and p.buckets % 2:
            raise RuleError(f"bidirectional buckets split into two equal halves; {p.buckets} is odd (its last "
                            "bucket would never be used)", field="buckets",
                            hint=Remedy(f"use {p.buckets - 1} or {p.buckets + 1} buckets"))
        exact = exact_buckets(p)
        if exact < 1:
            need, why = (4, "two per side") if p.bidirectional else (2, "one exact, one wide")
            raise RuleError(f"{p.buckets} bucket(s) leave no room for exact and logarithmic distances", field="buckets",
                            hint=Remedy(f"at least {need} ({why})"))
        if p.max_distance <= exact:
            raise RuleError(f"max_distance {p.max_distance} must exceed the {exact} distances counted exactly "
                            f"({p.buckets} buckets)", field="max_distance",
                            hint=Remedy(f"a max_distance above {exact} (T5: 128 with 32 buckets)"))
        queries, keys = inputs[0].length, inputs[-1].length
        return tensor((1, p.heads, queries, keys))  # [1, h, N, M]

    def cost(self, p, inputs, out, ctx) -> Cost:
        longest = max(dim_value(inputs[0].length), dim_value(inputs[-1].length))
        distances = 2 * reach(p, longest) + 1  # the bucket of each distance -R..R, int64
        return Cost(p.buckets * p.heads, 0, buffer_bytes=distances * DTYPE_BYTES["int64"])


RELATIVE_BIAS = register(RelativeBiasOp())
READS.register(RELATIVE_BIAS, ANY)
register_decoding(RELATIVE_BIAS, POSITIONAL)
