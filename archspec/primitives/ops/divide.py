"""divide: x / y, element-wise with broadcasting (a norm by hand: x / sqrt(mean(x**2) + eps))."""

from __future__ import annotations

from ...core.types import TensorType
from ..base import Cost, Op, Params, RuleError
from ..broadcast import broadcast
from ..registry import register


class DivideParams(Params):
    pass


class DivideOp(Op):
    """x / y, element-wise on floating-point values; shapes must broadcast.

    Integers are refused: torch divides them into floats, which is not their type."""

    primitive = "divide"
    Params = DivideParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "y")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        out = broadcast(inputs[0], inputs[1], "divide")
        if out.dtype != "float32":
            raise RuleError(f"divide reads floating-point values, got {out.dtype}", field="from",
                            hint="divide floats; integer ids or masks have no exact quotient")
        return out

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


DIVIDE = register(DivideOp())
