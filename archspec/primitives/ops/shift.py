"""shift: x + value, a constant added (Gemma's RMSNorm weight `1 + w`, an offset before a power)."""

from __future__ import annotations

from pydantic import Field

from ...core.types import TensorType
from ..base import Cost, Op, Params, require_float
from ..registry import register


class ShiftParams(Params):
    value: float = Field(allow_inf_nan=False, description="the constant added to every value")


class ShiftOp(Op):
    """x + value, element-wise; the output has the input's type."""

    primitive = "shift"
    Params = ShiftParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        require_float(x, "shift")
        return x

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


SHIFT = register(ShiftOp())
