"""subtract: x - y, element-wise with broadcasting (a difference of two branches, x minus a mean)."""

from __future__ import annotations

from ...core.types import TensorType
from ..base import Cost, Op, Params
from ..broadcast import broadcast
from ..registry import register


class SubtractParams(Params):
    pass


class SubtractOp(Op):
    """x - y, element-wise; shapes must broadcast."""

    primitive = "subtract"
    Params = SubtractParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "y")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return broadcast(inputs[0], inputs[1], "subtract")

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


SUBTRACT = register(SubtractOp())
