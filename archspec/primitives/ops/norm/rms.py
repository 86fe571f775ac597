"""norm kind=rms: RMSNorm, x / sqrt(mean(x^2) + eps) * weight (no mean, no bias; Llama)."""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType
from ...base import Cost, Eps, Op, Params
from ...registry import register
from .common import check_normalisable


class RmsNormParams(Params):
    kind: Literal["rms"]
    eps: Eps = 1e-6


class RmsNorm(Op):
    """RMSNorm over the channels (a weight, no bias)."""

    primitive = "norm"
    kind = "rms"
    Params = RmsNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return check_normalisable(inputs[0])

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(params=out.channels, flops=0)


RMS = register(RmsNorm())
