"""norm kind=affine: x * weight + bias over the channels, nothing normalised (Hugging Face's
MobileBERT NoNorm; timm's ResMLP Affine, whose alpha and beta are this weight and bias): of tokens,
a feature vector, or an image at every pixel. `bias: false` leaves the bias out."""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType
from ...base import Cost, Op, Params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .common import Bias, check_normalisable
from ...decoding import TOKENWISE, register_decoding


class AffineNormParams(Params):
    kind: Literal["affine"]
    bias: Bias = True


class AffineNorm(Op):
    """x * weight + bias per channel (weight ones and bias zeros to start)."""

    primitive = "norm"
    kind = "affine"
    Params = AffineNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return check_normalisable(inputs[0], image=True)

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(params=out.channels * (2 if p.bias else 1), flops=0)


AFFINE = register(AffineNorm())
READS.register(AFFINE, FLOAT_FIRST)
register_decoding(AFFINE, TOKENWISE)
