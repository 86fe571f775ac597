"""mlp: the feed-forward sub-layer: fc1, activation, fc2; with `dwconv`, a 3x3 depthwise
convolution over the token grid between fc1 and the activation (PVT v2), optionally preceded
by a ReLU (PVT v2 linear). With `gated`, fc1 gives twice the hidden width and the first half,
activated, gates the second: fc2(act(a) * b) (SwiGLU with act: silu, GeGLU with act: gelu).
With `experts` and `top_k`, a mixture of experts (Mixtral): a router (a linear without bias)
scores the experts per token, softmax in float32, the top_k kept and renormalised; the output
is the experts' outputs weighted by those probabilities. It is computed densely (every expert
on every token, zero weight where not chosen), so it exports with a dynamic batch: its FLOPs are
the dense ones, experts / top_k times what a sparse kernel does."""

from __future__ import annotations


from pydantic import Field

from ...core.types import TensorType
from ..activations import MlpActivation
from ..base import MAX_SIZE, Cost, Op, PositiveInt, Rate, RuleError, SublayerParams, sublayer_params
from ..counting import hidden_width, linear_flops, linear_params
from ..registry import register
from ..decoding import TOKENWISE, Mixes, register_decoding

class MlpParams(SublayerParams):
    hidden: PositiveInt | None = Field(None, description="hidden width (or give `ratio`)")
    ratio: float | None = Field(None, gt=0, description="hidden width as a multiple of the input width")
    act: MlpActivation = "gelu"
    dwconv: bool = Field(False, description="3x3 depthwise conv on the grid after fc1 (PVT v2)")
    extra_relu: bool = Field(False, description="ReLU before the depthwise conv (PVT v2 linear)")
    gated: bool = Field(False, description="gated MLP: fc2(act(a) * b) with [a, b] = fc1(x) (SwiGLU, GeGLU)")
    bias: bool = True
    dropout: Rate = 0.0
    experts: PositiveInt | None = Field(None, description="mixture of experts: this many MLPs, each token through "
                                                          "top_k of them (Mixtral); none: one MLP")
    top_k: PositiveInt | None = Field(None, description="with `experts`: the experts each token goes through")


def hidden_of(p: MlpParams, width: int) -> int:
    if (p.hidden is None) == (p.ratio is None):
        raise RuleError("mlp needs exactly one of `hidden` and `ratio`", field="hidden" if p.hidden else "ratio")
    if p.ratio is not None and width * p.ratio > MAX_SIZE:  # before int(): a huge ratio overflows to infinity
        raise RuleError(f"ratio {p.ratio} gives a hidden layer wider than {MAX_SIZE:,}", field="ratio",
                        hint="the hidden width is int(width * ratio): a ratio of 4 is usual; or give `hidden`")
    return hidden_width(width, p.hidden, p.ratio)


def check_experts(p: MlpParams) -> None:
    if p.experts is None:
        if p.top_k is not None:
            raise RuleError("top_k goes with experts", field="top_k", hint="add experts: N (a mixture of experts), "
                                                                           "or drop top_k")
        return
    if p.top_k is None:
        raise RuleError(f"a mixture of {p.experts} experts needs top_k, the experts each token goes through",
                        field="experts", hint="add top_k: 2 (Mixtral)")
    if p.top_k > p.experts:
        raise RuleError(f"top_k {p.top_k} is more than the {p.experts} experts", field="top_k",
                        hint=f"top_k is at most experts ({p.experts})")
    if p.dwconv:
        raise RuleError("a mixture of experts has no depthwise conv", field="dwconv")


class MlpOp(Op):
    """The feed-forward sub-layer: fc1, activation, fc2 (a depthwise conv on the grid for PVT v2; a
    mixture of such MLPs, routed per token, for Mixtral)."""

    primitive = "mlp"
    Params = MlpParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "tokens":
            raise RuleError(f"mlp reads tokens, got {x.layout_name()}")
        p.check_structure()
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
        if p.gated and p.dwconv:
            raise RuleError("a gated MLP has no depthwise conv", field="gated")
        check_experts(p)
        return x  # same shape

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        width, n = out.channels, out.max_numel() // out.channels
        hidden = hidden_of(p, width)
        first = 2 * hidden if p.gated else hidden  # fc1's width
        params = linear_params(width, first, p.bias) + linear_params(hidden, width, p.bias)
        flops = linear_flops(n, width, first) + linear_flops(n, hidden, width)
        if p.experts is not None:  # each expert over every token, and the router
            params = p.experts * params + linear_params(width, p.experts, bias=False)
            flops = p.experts * flops + linear_flops(n, width, p.experts)
        if p.dwconv:
            params += hidden * 9 + hidden
            flops += 2 * 9 * hidden * n
        return Cost(params + sublayer_params(p, width), flops)


def mlp_decoding(p: MlpParams):
    """Each token through its MLP (and its experts) alone; the depthwise conv reads its neighbours."""
    return Mixes("its depthwise conv reads the tokens around each one") if p.dwconv else TOKENWISE


MLP = register(MlpOp())
register_decoding(MLP, mlp_decoding)
