"""mlp: the feed-forward sub-layer: fc1, activation, fc2; with `dwconv`, a 3x3 depthwise
convolution over the token grid between fc1 and the activation (PVT v2), optionally preceded
by a ReLU (PVT v2 linear). With `gated`, fc1 gives twice the hidden width and the first half,
activated, gates the second: fc2(act(a) * b) (SwiGLU with act: silu, GeGLU with act: gelu).
With `experts` and `top_k`, a mixture of experts (Mixtral): a router (a linear without bias)
scores the experts per token, softmax in float32, the top_k kept and renormalised; the output
is the experts' outputs weighted by those probabilities. The router's options cover the other
routers: sigmoid scores (DeepSeek-V3) or a softmax over the chosen logits only (GPT-OSS), a
router bias (GPT-OSS), a correction bias used for choosing only (DeepSeek-V3's
e_score_correction_bias, a buffer), group-limited top-k (DeepSeek-V3's n_group / topk_group),
normalising and scaling the chosen weights, and shared experts (an ordinary MLP added to the
routed output). A gated MLP's gate and value may be interleaved in fc1's rows (GPT-OSS), the
gate and value clamped and an offset added to the value (GPT-OSS's clamped SwiGLU). It is
computed densely (every expert on every token, zero weight where not chosen), so it exports with
a dynamic batch: its FLOPs are the dense ones, experts / top_k times what a sparse kernel does."""

from __future__ import annotations


from typing import Literal

from ...core.declared import Field
from ...core.types import TensorType
from ..activations import MlpActivation, learned_params
from ..base import MAX_SIZE, Cost, Op, PositiveInt, Rate, RuleError, SublayerParams, not_tokens_hint, sublayer_params
from ..counting import hidden_width, linear_flops, linear_params
from ..registry import register
from ..dtypes import READS, FLOAT_FIRST
from ..decoding import TOKENWISE, Mixes, register_decoding

class MlpParams(SublayerParams):
    hidden: PositiveInt | None = Field(None, description="hidden width (or give `ratio`)")
    ratio: float | None = Field(None, gt=0, description="hidden width as a multiple of the input width")
    act: MlpActivation = "gelu"
    dwconv: bool = Field(False, description="3x3 depthwise conv on the grid after fc1 (PVT v2)")
    extra_relu: bool = Field(False, description="ReLU before the depthwise conv (PVT v2 linear)")
    gated: bool = Field(False, description="gated MLP: fc2(act(a) * b) with [a, b] = fc1(x) (SwiGLU, GeGLU)")
    bias: bool = True
    dropout: Rate = Field(0.0, description="dropout of the output (after fc2), and of the hidden activations "
                                          "unless hidden_dropout says otherwise")
    hidden_dropout: Rate | None = Field(None, description="dropout after the activation, before fc2 (default: "
                                                          "`dropout`, as timm's Mlp, torch's Transformer and T5 drop "
                                                          "twice; 0.0 for Hugging Face's GPT-2, BERT and ALBERT, "
                                                          "which drop once, after fc2)")
    experts: PositiveInt | None = Field(None, description="mixture of experts: this many MLPs, each token through "
                                                          "top_k of them (Mixtral); none: one MLP")
    top_k: PositiveInt | None = Field(None, description="with `experts`: the experts each token goes through")
    router_score: Literal["softmax", "sigmoid", "softmax_chosen", "sparsemixer"] = Field(
        "softmax", description="with `experts`: how the router's logits become weights. softmax: over every expert, "
                               "in float32, then the top_k chosen (Mixtral); sigmoid: each logit alone, the logits "
                               "in float32 (DeepSeek-V3); sparsemixer: PhiMoE's two experts, each weighted by a "
                               "softmax over the logits within router_jitter of its own (top_k 2; in training "
                               "chosen by Gumbel sampling with Heun's gradient, as Hugging Face's); "
                               "softmax_chosen: the top_k logits chosen, then a softmax "
                               "over those k (GPT-OSS)")
    router_jitter: float = Field(0.01, ge=0, allow_inf_nan=False,
                                 description="with router_score: sparsemixer: the relative distance from a chosen "
                                             "logit within which (2 x router_jitter) the others share its softmax "
                                             "(PhiMoE's router_jitter_noise)")
    router_input_jitter: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False,
                                       description="with router_score: sparsemixer: in training, each token's values "
                                                   "times uniform noise in [1 - j, 1 + j], twice, before the router "
                                                   "and the experts read them (PhiMoE's input_jitter_noise)")
    router_bias: bool = Field(False, description="with `experts`: the router's linear has a bias (GPT-OSS)")
    router_correction: bool = Field(False, description="with `experts`: a per-expert bias added to the scores for "
                                                       "choosing the experts only, not to their weights "
                                                       "(DeepSeek-V3's e_score_correction_bias); a buffer, not "
                                                       "trained, loaded from checkpoints (zeros when built)")
    router_groups: PositiveInt | None = Field(None, description="with `experts`: group-limited top-k (DeepSeek-V3's "
                                                                "n_group): the experts in this many equal groups, "
                                                                "each scored by the sum of its top 2 scores")
    router_group_score: Literal["top2_sum", "max"] = Field(
        "top2_sum", description="with `router_groups`: a group's score, the sum of its top 2 scores (DeepSeek-V3's "
                                "noaux_tc) or its largest (DeepSeek-V2's group_limited_greedy)")
    router_top_groups: PositiveInt | None = Field(None, description="with `router_groups`: the groups kept per token "
                                                                    "(DeepSeek-V3's topk_group); top_k is chosen "
                                                                    "among their experts")
    router_normalize: bool = Field(True, description="with `experts`: the chosen weights divided by their sum "
                                                     "(Mixtral; DeepSeek-V3's norm_topk_prob); false: as the "
                                                     "router gave them (OLMoE, Qwen2-MoE: norm_topk_prob false); "
                                                     "nothing to do with softmax_chosen, whose weights sum to 1")
    router_scale: float = Field(1.0, gt=0, allow_inf_nan=False,
                                description="with `experts`: the chosen weights multiplied by this, after "
                                            "normalising (DeepSeek-V3's routed_scaling_factor)")
    router_scales: Literal["output", "input"] = Field(
        "output", description="with `experts`: what each chosen weight multiplies: its expert's output (Mixtral, "
                              "DeepSeek-V3), or its expert's input, every expert's output then summed (Llama 4: "
                              "router_score: sigmoid, router_normalize: false)")
    shared_experts: PositiveInt | None = Field(None, description="with `experts`: this many experts every token goes "
                                                                 "through, unweighted, as one MLP of this many "
                                                                 "times the hidden width added to the routed output "
                                                                 "(DeepSeek-V3's n_shared_experts)")
    shared_gate: bool = Field(False, description="with `shared_experts`: their output times sigmoid of a linear map "
                                                 "of the token to one number, without bias (Qwen2-MoE's "
                                                 "shared_expert_gate)")
    experts_layout: Literal["out_in", "in_out"] = Field(
        "out_in", description="with `experts`: how the stacked expert weights are stored. out_in: fc1 [E, first, C], "
                              "fc2 [E, C, hidden] (Mixtral, DeepSeek-V3); in_out: fc1 [E, C, first], fc2 "
                              "[E, hidden, C] (GPT-OSS)")
    gate_layout: Literal["halves", "value_first", "interleaved"] = Field(
        "halves", description="with `gated`: where the gate and the value lie in fc1's output. halves: the gate "
                              "first, then the value (SwiGLU as Llama, Mixtral); value_first: the value first, then "
                              "the gate (Moonshine's `hidden, gate = fc1(x).chunk(2)`); interleaved: the gate at even "
                              "positions, the value at odd ones (GPT-OSS)")
    gate_limit: float | None = Field(None, gt=0, allow_inf_nan=False,
                                     description="with `gated`: the gate clamped to at most this and the value to "
                                                 "[-limit, limit] before the product (GPT-OSS's swiglu_limit); "
                                                 "none: no clamp")
    value_offset: float = Field(0.0, allow_inf_nan=False,
                                description="with `gated`: added to the value before the product, "
                                            "act(gate) * (value + offset) (GPT-OSS: 1)")


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
    check_groups(p)


SPARSEMIXER_OPTIONS = {"router_jitter": 0.01, "router_input_jitter": 0.0}  # router_score: sparsemixer's alone
ROUTER_OPTIONS = {"router_score": "softmax", "router_bias": False, "router_correction": False,
                  "router_groups": None, "router_top_groups": None, "router_group_score": "top2_sum",
                  "router_normalize": True, "router_scale": 1.0,
                  "router_scales": "output", "shared_experts": None, "shared_gate": False, "experts_layout": "out_in"}
GATE_OPTIONS = {"gate_layout": "halves", "gate_limit": None, "value_offset": 0.0}


def check_groups(p: MlpParams) -> None:
    """Group-limited top-k: equal groups of at least 2 experts (a group's score is the sum of its
    top 2), the kept groups holding at least top_k experts."""
    if p.router_groups is None:
        for name in ("router_top_groups", "router_group_score"):
            if name in p.model_fields_set:
                raise RuleError(f"{name} goes with router_groups", field=name,
                                hint=f"add router_groups: N (the experts in N groups), or drop {name}")
        return
    if p.router_top_groups is None:
        raise RuleError(f"group-limited routing over {p.router_groups} groups needs router_top_groups, the groups "
                        "kept per token", field="router_groups", hint="add router_top_groups (DeepSeek-V3's "
                                                                      "topk_group)")
    size, rest = divmod(p.experts, p.router_groups)
    if rest:
        raise RuleError(f"{p.experts} experts do not split into {p.router_groups} equal groups", field="router_groups",
                        hint=f"router_groups divides experts ({p.experts})")
    if size < 2 and p.router_group_score == "top2_sum":
        raise RuleError(f"groups of {size} expert: a group's score is the sum of its top 2 scores, so each group "
                        "needs at least 2 experts", field="router_groups",
                        hint=f"at most {p.experts // 2} groups for {p.experts} experts")
    if p.router_top_groups > p.router_groups:
        raise RuleError(f"router_top_groups {p.router_top_groups} is more than the {p.router_groups} groups",
                        field="router_top_groups", hint=f"at most router_groups ({p.router_groups})")
    if p.top_k > p.router_top_groups * size:
        raise RuleError(f"top_k {p.top_k} is more than the {p.router_top_groups * size} experts of the "
                        f"{p.router_top_groups} groups kept", field="top_k",
                        hint=f"keep more groups (router_top_groups), or top_k at most {p.router_top_groups * size}")


def check_sparsemixer(p: MlpParams) -> None:
    """PhiMoE's sparsemixer picks two experts (whatever top_k, in Hugging Face's), by its own rule:
    top_k 2, and none of the options of the other routers' choosing; its jitters only with it."""
    if p.router_score != "sparsemixer":
        for name in SPARSEMIXER_OPTIONS:
            if name in p.model_fields_set:
                raise RuleError(f"{name} goes with router_score: sparsemixer", field=name,
                                hint="add router_score: sparsemixer (PhiMoE), or drop " + name)
        return
    if p.top_k != 2:
        raise RuleError(f"sparsemixer picks 2 experts per token, and top_k is {p.top_k}", field="top_k",
                        hint="top_k: 2 (Hugging Face's PhiMoE picks two whatever num_experts_per_tok says)")
    for name in ("router_correction", "router_groups", "router_normalize", "router_scale", "router_scales"):
        if name in p.model_fields_set:
            raise RuleError(f"{name} is another router's option; sparsemixer weights its two experts by its own "
                            "rule", field=name, hint=f"drop {name}")


def check_options_belong(p: MlpParams) -> None:
    """The router's options need experts, the gate's need gated: a given option that would do nothing
    is an error, never ignored."""
    if p.experts is None:
        for name, default in ROUTER_OPTIONS.items():
            if getattr(p, name) != default:
                raise RuleError(f"{name} goes with experts (a mixture of experts)", field=name,
                                hint=f"add experts: N and top_k: K, or drop {name}")
    if p.shared_gate and p.experts is not None and p.shared_experts is None:
        raise RuleError("shared_gate gates the shared experts' output; this mixture has no shared experts",
                        field="shared_gate", hint="add shared_experts: N (their width: N times the hidden), or drop "
                                                  "shared_gate")
    check_sparsemixer(p)
    if p.router_score == "softmax_chosen" and "router_normalize" in p.model_fields_set:
        raise RuleError("router_normalize does nothing with router_score: softmax_chosen, whose chosen weights "
                        "already sum to 1", field="router_normalize", hint="drop router_normalize")
    if not p.gated:
        for name, default in GATE_OPTIONS.items():
            if getattr(p, name) != default or name in p.model_fields_set:  # given, even at its default (GLM-4 trial)
                raise RuleError(f"{name} goes with gated: true (a gated MLP)", field=name,
                                hint=f"add gated: true, or drop {name}")


class MlpOp(Op):
    """The feed-forward sub-layer: fc1, activation, fc2 (a depthwise conv on the grid for PVT v2; a
    mixture of such MLPs, routed per token, for Mixtral)."""

    primitive = "mlp"
    Params = MlpParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "tokens":
            raise RuleError(f"mlp reads tokens, got {x.layout_name()}", hint=not_tokens_hint(x))
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
        check_options_belong(p)
        check_experts(p)
        return x  # same shape

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        width, n = out.channels, out.row_numel() // out.channels
        hidden = hidden_of(p, width)
        first = 2 * hidden if p.gated else hidden  # fc1's width
        params = linear_params(width, first, p.bias) + linear_params(hidden, width, p.bias)
        flops = linear_flops(n, width, first) + linear_flops(n, hidden, width)
        if p.experts is not None:  # each expert over every token, the router, and the shared experts
            shared_params = shared_flops = 0
            if p.shared_experts is not None:  # one MLP of shared_experts times the hidden width
                wide, wide_first = p.shared_experts * hidden, p.shared_experts * first
                shared_params = linear_params(width, wide_first, p.bias) + linear_params(wide, width, p.bias)
                shared_flops = linear_flops(n, width, wide_first) + linear_flops(n, wide, width)
                if p.shared_gate:  # sigmoid(gate(x)): one number per token
                    shared_params, shared_flops = shared_params + width, shared_flops + linear_flops(n, width, 1)
            params = p.experts * params + linear_params(width, p.experts, bias=p.router_bias) + shared_params
            flops = p.experts * flops + linear_flops(n, width, p.experts) + shared_flops
        if p.dwconv:
            params += hidden * 9 + hidden
            flops += 2 * 9 * hidden * n
        acts = 2 if p.experts is not None and p.shared_experts is not None else 1  # the experts' one, the shared's
        params += acts * learned_params(p.act)  # star_relu's scale and bias
        return Cost(params + sublayer_params(p, width), flops)


def mlp_decoding(p: MlpParams):
    """Each token through its MLP (and its experts) alone; the depthwise conv reads its neighbours."""
    return Mixes("its depthwise conv reads the tokens around each one") if p.dwconv else TOKENWISE


MLP = register(MlpOp())
READS.register(MLP, FLOAT_FIRST)
register_decoding(MLP, mlp_decoding)
