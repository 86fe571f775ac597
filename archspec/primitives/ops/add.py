"""add: x + y, element-wise with broadcasting (e.g. two embeddings, or tokens plus a learned
parameter)."""

from __future__ import annotations

from ...core.types import TensorType
from ..base import Cost, Op, Params
from ..broadcast import broadcast
from ..registry import register


class AddParams(Params):
    pass


class AddOp(Op):
    """x + y, element-wise; shapes must broadcast."""

    primitive = "add"
    Params = AddParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "y")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return broadcast(inputs[0], inputs[1], "add")

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


ADD = register(AddOp())
