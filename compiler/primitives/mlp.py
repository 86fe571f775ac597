"""mlp: the feed-forward sub-layer: fc1, activation, fc2; with `dwconv`, a 3x3 depthwise
convolution over the token grid between fc1 and the activation (PVT v2), optionally preceded
by a ReLU (PVT v2 linear)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..registry import (MAX_SIZE, Cost, PositiveInt, Primitive, Rate, RuleError, Sublayer, hidden_width,
                        linear_flops, linear_params, norm_params, one_input, register)
from ..types import TensorType

Activation = Literal["gelu", "gelu_tanh", "quick_gelu", "relu"]


class MlpParams(Sublayer):
    hidden: PositiveInt | None = Field(None, description="hidden width (or give `ratio`)")
    ratio: float | None = Field(None, gt=0, description="hidden width as a multiple of the input width")
    act: Activation = "gelu"
    dwconv: bool = Field(False, description="3x3 depthwise conv on the grid after fc1 (PVT v2)")
    extra_relu: bool = Field(False, description="ReLU before the depthwise conv (PVT v2 linear)")
    bias: bool = True
    dropout: Rate = 0.0


def hidden_of(p: MlpParams, width: int) -> int:
    if (p.hidden is None) == (p.ratio is None):
        raise RuleError("mlp needs exactly one of `hidden` and `ratio`", field="hidden" if p.hidden else "ratio")
    return hidden_width(width, p.hidden, p.ratio)


def infer(p: MlpParams, inputs: list[TensorType], ctx) -> TensorType:
    (x,) = inputs
    if x.layout != "tokens":
        raise RuleError(f"mlp reads tokens, got {x.layout_name()}")
    hidden = hidden_of(p, x.channels)
    if hidden < 1:
        raise RuleError(f"ratio {p.ratio} gives an empty hidden layer for width {x.channels}", field="ratio")
    if hidden > MAX_SIZE:
        raise RuleError(f"ratio {p.ratio} gives a hidden layer of {hidden} (at most {MAX_SIZE})", field="ratio")
    if p.dwconv and (x.grid is None or x.prefix):
        why = (f"these tokens have {x.prefix} class token{'s' if x.prefix > 1 else ''}" if x.prefix
               else "these tokens have no grid")
        raise RuleError(f"the depthwise conv needs a token grid without class tokens; {why}", field="dwconv",
                        hint=None if x.prefix else "patchify an image, or declare the input's `grid: [H, W]`")
    if p.extra_relu and not p.dwconv:
        raise RuleError("extra_relu goes with dwconv", field="extra_relu")
    return x  # same shape


def cost(p: MlpParams, inputs, out: TensorType) -> Cost:
    width, n = out.channels, out.max_numel() // out.channels
    hidden = hidden_of(p, width)
    params = linear_params(width, hidden, p.bias) + linear_params(hidden, width, p.bias)
    flops = linear_flops(n, width, hidden) + linear_flops(n, hidden, width)
    if p.dwconv:
        params += hidden * 9 + hidden
        flops += 2 * 9 * hidden * n
    if p.norm != "none":
        params += norm_params(width)
    return Cost(params, flops)


PRIMITIVE = register(Primitive("mlp", MlpParams, infer, cost, one_input, doc=__doc__))
