"""norm kind=layer (the default): a LayerNorm over the channels (the final norm of a stage or tower)."""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType
from ...base import Cost, Eps, Op, Params
from ...counting import norm_params
from ...registry import register
from .common import check_normalisable


class LayerNormParams(Params):
    kind: Literal["layer"] = "layer"
    eps: Eps = 1e-5


class LayerNorm(Op):
    """A LayerNorm over the channels of tokens or a feature vector (weight and bias)."""

    primitive = "norm"
    kind = "layer"
    default = True
    Params = LayerNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return check_normalisable(inputs[0])

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(params=norm_params(out.channels), flops=0)


LAYER = register(LayerNorm())
