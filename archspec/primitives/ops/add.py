"""add: x + y (+ z ...), element-wise with broadcasting (e.g. two embeddings, tokens plus a
learned parameter, or a parallel block's input and its two branches)."""

from __future__ import annotations

import functools

from ...core.types import TensorType
from ..base import Cost, Op, Params
from ..broadcast import broadcast
from ..registry import register


class AddParams(Params):
    pass


class AddOp(Op):
    """x + y (+ more), element-wise; shapes must broadcast."""

    primitive = "add"
    Params = AddParams
    variadic = True

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "y")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return functools.reduce(lambda total, t: broadcast(total, t, "add"), inputs)

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


ADD = register(AddOp())
