"""softmax: exp(x) / sum(exp(x)) along one axis of each sample (attention scores written out,
a router's weights)."""

from __future__ import annotations

from pydantic import Field

from ...core.types import TensorType
from ..base import Cost, Op, Params, require_float
from ..registry import register
from .reduce import sample_axis


class SoftmaxParams(Params):
    axis: int = Field(-1, description="the axis that sums to 1, counted from the batch (0) or from the end (-1)")


class SoftmaxOp(Op):
    """softmax along `axis` (not the batch); the output has the input's type."""

    primitive = "softmax"
    Params = SoftmaxParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        require_float(x, "softmax")
        sample_axis(p.axis, x, "softmax", "axis")
        return x

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


SOFTMAX = register(SoftmaxOp())
