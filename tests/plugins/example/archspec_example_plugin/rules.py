"""The plugin's rules (no torch): parameters, shape and cost of its ops."""

from __future__ import annotations

from typing import Literal

from archspec.core.types import TensorType, vector
from archspec.primitives.base import Cost, Field, Op, Params, PositiveInt, RuleError
from archspec.primitives.counting import linear_flops, linear_params
from archspec.primitives.registry import register
from archspec.primitives.decoding import CLASSES, TOKENWISE, Mixes, register_decoding
from archspec.primitives.dtypes import FLOAT_FIRST, FLOATS, READS


class ScaleParams(Params):
    init: float = Field(1.0, description="initial value of the learned scalar")


class Scale(Op):
    """x times one learned scalar."""

    primitive = "learned_scale"
    Params = ScaleParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        return inputs[0]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(1, 0)


class MeanMaxParams(Params):
    kind: Literal["mean_max"]
    classes: PositiveInt


class MeanMaxHead(Op):
    """The mean and the max of the tokens, concatenated, then a linear map to classes."""

    primitive = "head"
    kind = "mean_max"
    Params = MeanMaxParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "tokens":
            raise RuleError(f"mean_max pools tokens, got {x.layout_name()}")
        return vector(p.classes)

    def cost(self, p, inputs, out, ctx) -> Cost:
        width = 2 * inputs[0].channels
        return Cost(linear_params(width, p.classes), linear_flops(1, width, p.classes))


SCALE = register(Scale())
MEAN_MAX = register(MeanMaxHead())
register_decoding(SCALE, TOKENWISE)  # what generate and training ask of each op (archspec.primitives.decoding)
register_decoding(MEAN_MAX, Mixes("a classifier pools the tokens"), CLASSES)
READS.register(SCALE, FLOATS)  # the dtypes each op reads (archspec.primitives.dtypes): int64 ids are refused at check
READS.register(MEAN_MAX, FLOAT_FIRST)
