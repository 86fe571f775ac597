"""scale: x * factor, a constant factor (attention's 1/sqrt(d) folded in or undone, as T5's
`q * d**-0.5`; the two halves of a logit soft-cap, c * tanh(x / c))."""

from __future__ import annotations

from pydantic import Field

from ...core.types import TensorType
from ..base import Cost, Op, Params, require_float
from ..registry import register


class ScaleParams(Params):
    factor: float = Field(allow_inf_nan=False, description="the constant every value is multiplied by")


class ScaleOp(Op):
    """x * factor, element-wise; the output has the input's type."""

    primitive = "scale"
    Params = ScaleParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        require_float(x, "scale")
        return x

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


SCALE = register(ScaleOp())
