"""scatter: the inverse placement of `gather`: tokens [B, M, C] (or a [B, M] tensor) put at
the positions an index gives into a sequence [B, N, C] (or [B, N]), which fills the other
positions; it may be a learned parameter (batch 1). The result keeps the grid of that
sequence. Indices should be distinct (torch: which of two writes wins is unspecified)."""

from __future__ import annotations

from dataclasses import replace

from ...core.declared import Field
from ...core.types import BATCH, TensorType
from ..base import Cost, Op, Params, PositiveInt, RuleError
from ..registry import register
from ..dtypes import READS, ANY
from .gather import check_index, check_sequence, shortest
from ..decoding import Mixes, register_decoding


class ScatterParams(Params):
    count: PositiveInt | None = Field(None, description="use only the first `count` indices (as gather's); "
                                                        "default: all of them")
    skip_prefix: bool = Field(False, description="keep the prefix (class) tokens of `into` in place; the index "
                                                 "counts the tokens after them")


class ScatterOp(Op):
    """into.scatter(1, index[:, :count], x), from: [into, index, x]: [B or 1, N, C] -> [B, N, C].

    x is [B, M, C] (or [B, M] into [B, N]); the inputs come in torch's order."""

    primitive = "scatter"
    Params = ScatterParams

    def reads(self, p) -> tuple[str, ...]:
        return ("into", "index", "x")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        into, index, x = inputs
        check_index(index)
        check_sequence(x, "scatter", "x", None)
        if into.shape[0] is not BATCH:  # a parameter: one sequence for every sample
            into = replace(into, shape=(BATCH,) + tuple(into.shape[1:]))
        check_sequence(into, "scatter", "into", p.skip_prefix)
        if len(x.shape) != len(into.shape) or x.shape[2:] != into.shape[2:] or x.dtype != into.dtype:
            raise RuleError(f"scatter puts {x.describe()} into {into.describe()}: the sizes after the sequence "
                            "and the dtypes must agree", field="from")
        used = index.length if p.count is None else p.count
        if p.count is not None and p.count > shortest(index.length):
            raise RuleError(f"count {p.count} is more than the {index.length} indices", field="count",
                            hint=f"at most {shortest(index.length)}")
        if x.length != used:
            raise RuleError(f"{used} indices for {x.length} values", field="count" if p.count else "from",
                            hint=count_hint(x.length, index.length))
        room = shortest(into.length) - into.prefix
        if shortest(x.length) > room:
            raise RuleError(f"{x.length} values do not fit in {room} positions", field="from")
        return into  # [B, N, C]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)

    def value_range(self, p, slot: int, ctx) -> int | None:
        if slot != 1:
            return None
        into = ctx.node_named(ctx.node.inputs[0]).type
        return shortest(into.length) - into.prefix  # positions after the prefix


def count_hint(values, indices) -> str:
    """How to give one index per value: `count` where fewer values than indices (a fixed number
    of them); else an index of as many (the PaliGemma trial was offered a count above the indices)."""
    if isinstance(values, int) and values <= shortest(indices):
        return f"one index per value placed: `count: {values}` uses the first {values}"
    return f"one index per value placed: an index [B, {values}] (it has {indices})"


SCATTER = register(ScatterOp())
READS.register(SCATTER, ANY)
register_decoding(SCATTER, Mixes("scatter writes values at other tokens"))
