"""norm kind=batch: a BatchNorm over the channels of an image, tokens or a feature vector,
statistics over every other axis (timm's conv stems and XCiT's local patch interaction on
images; LeViT's Linear + BatchNorm on tokens). Its running mean and variance are buffers the
state dict keeps (and a checkpoint loads); training updates them, eval uses them. `bias: false`
leaves the learned bias out (the weight stays)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType
from ...base import Cost, Eps, Op, Params, RuleError
from ...counting import norm_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .common import Bias
from ...decoding import TOKENWISE, register_decoding


class BatchNormParams(Params):
    kind: Literal["batch"]
    eps: Eps = 1e-5
    momentum: float = Field(0.1, gt=0, le=1, allow_inf_nan=False,
                            description="the running statistics' update rate in training (torch's momentum)")
    bias: Bias = True


class BatchNorm(Op):
    """A BatchNorm over the channels (weight, bias, running mean and variance)."""

    primitive = "norm"
    kind = "batch"
    Params = BatchNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout not in ("image", "tokens", "vector"):
            raise RuleError(f"a batch norm needs an image, tokens or a feature vector, got {x.layout_name()}")
        return x  # same shape

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(params=norm_params(out.channels) if p.bias else out.channels, flops=0)


BATCH = register(BatchNorm())
READS.register(BATCH, FLOAT_FIRST)
register_decoding(BATCH, TOKENWISE)
