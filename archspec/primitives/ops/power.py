"""power: x ** exponent, a constant exponent (squares for a mean square, -0.5 for a reciprocal
square root). A negative value to a fractional power is NaN, as in torch."""

from __future__ import annotations

from pydantic import Field

from ...core.types import TensorType
from ..base import Cost, Op, Params, require_float
from ..registry import register


class PowerParams(Params):
    exponent: float = Field(allow_inf_nan=False, description="the constant power every value is raised to")


class PowerOp(Op):
    """x ** exponent, element-wise; the output has the input's type."""

    primitive = "power"
    Params = PowerParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        require_float(x, "power")
        return x

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


POWER = register(PowerOp())
