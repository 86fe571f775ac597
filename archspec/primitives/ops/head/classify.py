"""classify: pool (the class token, or the mean of the grid tokens), an optional LayerNorm,
a linear map to class logits (timm ClassifierHead)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, vector
from ...base import Cost, Eps, Op, Params, PositiveInt
from ...counting import linear_flops, linear_params, norm_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .pooling import check_pool
from ...decoding import CLASSES, Mixes, register_decoding


class ClassifyParams(Params):
    kind: Literal["classify"]
    classes: PositiveInt
    pool: Literal["cls", "mean"] = "mean"
    norm: bool = Field(False, description="LayerNorm after pooling (timm's fc_norm)")
    norm_eps: Eps = 1e-5
    bias: bool = True


class ClassifyHead(Op):
    """Pool (cls token or mean of the grid tokens), optional LayerNorm, linear to classes."""

    primitive = "head"
    kind = "classify"
    Params = ClassifyParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        check_pool(p.pool, inputs[0])
        return vector(p.classes)  # [B, N, C] -> [B, classes]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        width = inputs[0].channels
        params = linear_params(width, p.classes, p.bias) + (norm_params(width) if p.norm else 0)
        return Cost(params, linear_flops(1, width, p.classes))


CLASSIFY = register(ClassifyHead())
READS.register(CLASSIFY, FLOAT_FIRST)
register_decoding(CLASSIFY, Mixes("a classifier pools the tokens"), CLASSES)
