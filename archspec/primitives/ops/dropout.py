"""dropout: zero values with probability `rate` in training (identity in eval)."""

from __future__ import annotations

from pydantic import Field

from ...core.types import TensorType
from ..base import Cost, Op, Params, Rate, require_float
from ..registry import register


class DropoutParams(Params):
    rate: Rate = Field(description="probability of zeroing a value in training")


class Dropout(Op):
    """Dropout (identity in eval)."""

    primitive = "dropout"
    Params = DropoutParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        require_float(x, "dropout", field=None)
        return x

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


DROPOUT = register(Dropout())
