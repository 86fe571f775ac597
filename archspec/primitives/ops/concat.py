"""concat: join tensors along the tokens (sequence) or the channels."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field

from ...core.types import Sym, TensorType, tokens
from ..base import Cost, Op, Params, RuleError
from ..registry import register


class ConcatParams(Params):
    along: Literal["tokens", "channels"] = Field("tokens", description="join along the sequence or the channels")


class ConcatOp(Op):
    """Tensors joined along the tokens or the channels; the other sizes must agree."""

    primitive = "concat"
    Params = ConcatParams
    variadic = True

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "y")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        first = inputs[0]
        for i, t in enumerate(inputs):
            if t.layout != "tokens" and not (p.along == "channels" and t.layout in ("image", "vector")):
                raise RuleError(f"concat along {p.along} reads tokens, got {t.layout_name()} (input {i + 1})",
                                field="from")
            if t.layout != first.layout or t.dtype != first.dtype:
                raise RuleError(f"concat reads tensors of one layout; input {i + 1} is {t.layout_name()}, "
                                f"input 1 {first.layout_name()}", field="from")
        if p.along == "channels":
            return self.channels(inputs)
        widths = {t.channels for t in inputs}
        if len(widths) > 1:
            raise RuleError(f"concat along tokens needs one width, got {sorted(widths)}", field="from",
                            hint="project the inputs to one width first (linear)")
        lengths = [t.length for t in inputs]
        if any(isinstance(n, Sym) for n in lengths):
            raise RuleError("concat along tokens needs fixed lengths", field="from")
        total = sum(lengths)
        last = inputs[-1]
        if last.grid and all(not t.grid for t in inputs[:-1]):  # tokens put in front of a grid: a prefix
            return tokens(total, first.channels, last.grid, last.prefix + sum(lengths[:-1]), last.origin)
        return tokens(total, first.channels)  # [B, sum(N), C]

    def channels(self, inputs: list[TensorType]) -> TensorType:
        first = inputs[0]

        def others(t: TensorType) -> tuple:  # every size but the channels
            return tuple(t.shape[2:]) if t.layout == "image" else tuple(t.shape[:-1])

        for i, t in enumerate(inputs):
            if others(t) != others(first):
                raise RuleError(f"concat along channels needs equal other sizes; input {i + 1} is "
                                f"{t.describe()}, input 1 {first.describe()}", field="from")
        width = sum(t.channels for t in inputs)
        if first.layout == "image":
            return replace(first, shape=(first.shape[0], width) + tuple(first.shape[2:]))  # [B, sum(C), H, W]
        return replace(first, shape=tuple(first.shape[:-1]) + (width,))  # [..., sum(C)]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


CONCAT = register(ConcatOp())
