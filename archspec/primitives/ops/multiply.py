"""multiply: x * y, element-wise with broadcasting (e.g. a gate, or a learned per-channel scale)."""

from __future__ import annotations

from ...core.types import TensorType
from ..base import Cost, Op, Params
from ..broadcast import broadcast
from ..registry import register


class MultiplyParams(Params):
    pass


class MultiplyOp(Op):
    """x * y, element-wise; shapes must broadcast."""

    primitive = "multiply"
    Params = MultiplyParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "y")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return broadcast(inputs[0], inputs[1], "multiply")

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


MULTIPLY = register(MultiplyOp())
