"""softmax: exp(x) / sum(exp(x)) along one axis of each sample (attention scores written out,
a router's weights)."""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import TensorType
from ..base import Op, Params, no_cost, require_float
from ..decoding import TOKENWISE, Mixes, register_decoding
from ..registry import register
from ..dtypes import READS, FLOATS
from .reduce import sample_axis


class SoftmaxParams(Params):
    axis: int = Field(-1, description="the axis that sums to 1, counted from the batch (0) or from the end (-1)")


class SoftmaxOp(Op):
    """softmax along `axis` (not the batch); the output has the input's type."""

    primitive = "softmax"
    Params = SoftmaxParams
    cost = no_cost  # FlopCounterMode counts no FLOPs for a softmax

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        require_float(x, "softmax")
        sample_axis(p.axis, x, "softmax", "axis")
        return x


def softmax_decoding(p: SoftmaxParams):
    """Tokenwise along the channels (the last axis) alone; along any other axis it mixes the tokens."""
    return TOKENWISE if p.axis == -1 else Mixes("a softmax along an axis other than the last mixes the tokens")


SOFTMAX = register(SoftmaxOp())
READS.register(SOFTMAX, FLOATS)
register_decoding(SOFTMAX, softmax_decoding)
