"""norm kind=rms: RMSNorm, x / sqrt(mean(x^2) + eps) * weight (no mean, no bias; Llama); with
`offset`, x / sqrt(mean(x^2) + eps) * (offset + weight) (Gemma: offset 1, the weight starting at 0)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType
from ...base import Cost, Eps, Op, Params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .common import check_normalisable
from ...decoding import TOKENWISE, register_decoding


class RmsNormParams(Params):
    kind: Literal["rms"]
    eps: Eps = 1e-6
    offset: float = Field(0.0, allow_inf_nan=False, description="scale by (offset + weight), the weight starting "
                                                                "at 1 - offset (Gemma: 1)")


class RmsNorm(Op):
    """RMSNorm over the channels (a weight, no bias; with `offset`, scaled by offset + weight)."""

    primitive = "norm"
    kind = "rms"
    Params = RmsNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return check_normalisable(inputs[0])

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(params=out.channels, flops=0)


RMS = register(RmsNorm())
READS.register(RMS, FLOAT_FIRST)
register_decoding(RMS, TOKENWISE)
