"""slice: a range of tokens (or channels), e.g. the grid tokens without the class token
(`start: 1`), which keeps the grid, or the class and distillation tokens (`stop: 2`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field

from ...core.types import Sym, TensorType, tokens
from ..base import Cost, NonNegInt, Op, Params, PositiveInt, RuleError
from ..registry import register


class SliceParams(Params):
    along: Literal["tokens", "channels"] = "tokens"
    start: NonNegInt = Field(0, description="first index taken")
    stop: PositiveInt | None = Field(None, description="index after the last one taken (default: the end)")


class SliceOp(Op):
    """tokens[start:stop] (or channels[start:stop]); a slice that is exactly the grid keeps it."""

    primitive = "slice"
    Params = SliceParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "tokens" and not (p.along == "channels" and x.layout == "vector"):
            raise RuleError(f"slice reads tokens, got {x.layout_name()}")
        size = x.channels if p.along == "channels" else x.length
        if isinstance(size, Sym):
            if p.stop is None or p.stop > size.lo:
                raise RuleError(f"slicing a symbolic length ({size}, at least {size.lo}) needs a `stop` it "
                                "always reaches", field="stop")
            size = size.lo
        stop = size if p.stop is None else p.stop
        if not p.start < stop <= size:
            raise RuleError(f"slice {p.start}:{stop} is outside or empty for {size} {p.along}", field="start",
                            hint=f"indices run from 0 to {size}")
        if p.along == "channels":
            return replace(x, shape=tuple(x.shape[:-1]) + (stop - p.start,))  # [..., stop - start]
        if x.grid and p.start == x.prefix and stop == size:
            return replace(x, shape=(x.shape[0], stop - p.start, x.channels), prefix=0)  # the grid tokens
        if x.grid and p.start == 0 and stop == size:
            return x
        out = tokens(stop - p.start, x.channels)  # [B, stop - start, C]
        return replace(out, shape=(x.shape[0],) + out.shape[1:])  # a param's batch of 1 stays 1

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


SLICE = register(SliceOp())
