"""activation: an element-wise non-linearity."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...core.types import TensorType
from ..base import Cost, Op, Params, RuleError
from ..registry import register

Function = Literal["gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "tanh", "sigmoid"]


class ActivationParams(Params):
    fn: Function = Field(description="gelu (erf), gelu_tanh, quick_gelu, relu, silu, tanh or sigmoid")


class Activation(Op):
    """fn(x), element-wise."""

    primitive = "activation"
    Params = ActivationParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.dtype != "float32":
            raise RuleError(f"an activation reads floating-point values, got {x.layout_name()}")
        return x

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


ACTIVATION = register(Activation())
