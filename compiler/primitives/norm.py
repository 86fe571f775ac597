"""norm: a standalone LayerNorm over the channels (the final norm of a stage or tower)."""

from __future__ import annotations

from ..registry import Cost, Eps, Params, Primitive, RuleError, norm_params, one_input, register
from ..types import TensorType


class NormParams(Params):
    eps: Eps = 1e-5


def infer(p: NormParams, inputs: list[TensorType], ctx) -> TensorType:
    (x,) = inputs
    if x.layout not in ("tokens", "vector"):
        raise RuleError(f"norm needs tokens or a feature vector, got {x.layout_name()}",
                        hint="a LayerNorm normalises the channels of tokens; patchify an image first")
    return x  # same shape


def cost(p: NormParams, inputs, out: TensorType) -> Cost:
    return Cost(params=norm_params(out.channels), flops=0)


PRIMITIVE = register(Primitive("norm", NormParams, infer, cost, one_input, doc=__doc__))
