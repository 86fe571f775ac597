"""norm kind=layer (the default): a LayerNorm over the channels (the final norm of a stage or tower):
of tokens or a feature vector, or of an image [B, C, H, W] at every pixel (timm's LayerNorm2d:
ConvNeXt, GC ViT, NesT); `bias: false` leaves the bias out (torch's LayerNorm(bias=False)); `affine:
false` both the weight and the bias (OLMo's; torch's elementwise_affine=False); `offset` scales by
(offset + weight) (Nemotron's LayerNorm1P: 1)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType
from ...base import Cost, Eps, Op, Params, RuleError
from ...counting import norm_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .common import Bias, check_normalisable
from ...decoding import TOKENWISE, register_decoding


class LayerNormParams(Params):
    kind: Literal["layer"] = "layer"
    eps: Eps = 1e-5
    bias: Bias = True
    offset: float = Field(0.0, allow_inf_nan=False, description="scale by (offset + weight), the weight starting "
                                                                "at 1 - offset (Nemotron's LayerNorm1P: 1)")
    affine: bool = Field(True, description="a learned weight and bias; false: neither, the norm has no parameters "
                                           "(OLMo's LayerNorm; torch's elementwise_affine=False)")


class LayerNorm(Op):
    """A LayerNorm over the channels of tokens, a feature vector or an image (weight, and bias
    unless `bias: false`)."""

    primitive = "norm"
    kind = "layer"
    default = True
    Params = LayerNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        if not p.affine:
            for name in ("bias", "offset"):
                if name in p.model_fields_set:
                    raise RuleError(f"{name} goes with a weight, and affine: false leaves the norm without one",
                                    field=name, hint=f"drop {name}, or affine: false")
        if p.offset and inputs[0].layout == "image":
            raise RuleError("offset covers a LayerNorm of tokens or a vector, not of an image", field="offset",
                            hint="read the image as tokens first (to_tokens), or drop offset")
        return check_normalisable(inputs[0], image=True)

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        if not p.affine:
            return Cost(params=0, flops=0)
        return Cost(params=norm_params(out.channels) if p.bias else out.channels, flops=0)


LAYER = register(LayerNorm())
READS.register(LAYER, FLOAT_FIRST)
register_decoding(LAYER, TOKENWISE)
