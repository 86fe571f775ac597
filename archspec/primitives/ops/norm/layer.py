"""norm kind=layer (the default): a LayerNorm over the channels (the final norm of a stage or tower):
of tokens or a feature vector, or of an image [B, C, H, W] at every pixel (timm's LayerNorm2d:
ConvNeXt, GC ViT, NesT); `bias: false` leaves the bias out (torch's LayerNorm(bias=False))."""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType
from ...base import Cost, Eps, Op, Params
from ...counting import norm_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .common import Bias, check_normalisable
from ...decoding import TOKENWISE, register_decoding


class LayerNormParams(Params):
    kind: Literal["layer"] = "layer"
    eps: Eps = 1e-5
    bias: Bias = True


class LayerNorm(Op):
    """A LayerNorm over the channels of tokens, a feature vector or an image (weight, and bias
    unless `bias: false`)."""

    primitive = "norm"
    kind = "layer"
    default = True
    Params = LayerNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return check_normalisable(inputs[0], image=True)

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(params=norm_params(out.channels) if p.bias else out.channels, flops=0)


LAYER = register(LayerNorm())
READS.register(LAYER, FLOAT_FIRST)
register_decoding(LAYER, TOKENWISE)
