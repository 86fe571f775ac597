"""distilled: DeiT's pair of classifiers, one on the class token and one on the distillation
token; their average in eval, both (a tuple) in training."""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType, vector
from ...base import Cost, Op, Params, PositiveInt, RuleError
from ...counting import linear_flops, linear_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from ...decoding import CLASSES, Mixes, register_decoding


class DistilledParams(Params):
    kind: Literal["distilled"]
    classes: PositiveInt


class DistilledHeadOp(Op):
    """(fc(x[:, 0]) + fc_dist(x[:, 1])) / 2 in eval; (fc(x[:, 0]), fc_dist(x[:, 1])) in training."""

    primitive = "head"
    kind = "distilled"
    Params = DistilledParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "tokens" or x.prefix < 2:
            have = f"{x.prefix} prefix token(s)" if x.layout == "tokens" else x.layout_name()
            raise RuleError(f"a distilled head reads the class and distillation tokens; these have {have}",
                            hint="patchify with cls_token: 2")
        if ctx.readers(ctx.node.name):
            raise RuleError("a distilled head gives a tuple in training, so it must be an output that no node reads",
                            hint="name it under `outputs`, and read its input instead")
        return vector(p.classes)  # [B, N, C] -> [B, classes]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        width = inputs[0].channels
        return Cost(2 * linear_params(width, p.classes), 2 * linear_flops(1, width, p.classes))


DISTILLED = register(DistilledHeadOp())
READS.register(DISTILLED, FLOAT_FIRST)
register_decoding(DISTILLED, Mixes("a classifier pools the tokens"), CLASSES)
