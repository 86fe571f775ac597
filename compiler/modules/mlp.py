"""mlp (torch): fc1, activation (after a depthwise conv on the grid for PVT v2), fc2; gated:
fc2(act(a) * b) with [a, b] = fc1(x) (halves, or interleaved as GPT-OSS; optionally clamped and
the value offset, GPT-OSS's clamped SwiGLU); with experts, a mixture of such MLPs routed per token
(the router in router.py: Mixtral, DeepSeek-V3, GPT-OSS), plus shared experts (DeepSeek-V3).

The depthwise conv reads the tokens [B, N, hidden] as a channels-last image (a view, no copy)
and its channels-last output is the tokens again (a view): no transposing copies. In eager CPU
inference the activation is fused into fc1 or the conv (oneDNN post-ops; common.Linear)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.mlp import GATE_OPTIONS, MLP, ROUTER_OPTIONS, hidden_of

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .activations import activation, fusable
from .common import Conv2d, Linear, grid_as_image, image_as_tokens, make, trunc_normal_linears
from .router import Router
from .sublayer import Sublayer, sublayer_args


def glu(h, act, layout="halves", limit=None, offset=0.0):
    """act(gate) * value from a gated fc1's output [..., 2 hidden] -> [..., hidden]: the gate the
    first half (halves), the second (value_first: Moonshine's) or the even positions
    (interleaved, GPT-OSS's gate_up_proj[..., ::2]);
    with `limit`, the gate clamped to at most limit and the value to [-limit, limit]; `offset`
    added to the value (GPT-OSS: (up + 1) * glu, its swiglu_limit the limit)."""
    if layout == "interleaved":
        gate, value = h[..., ::2], h[..., 1::2]  # [..., hidden] each
    elif layout == "value_first":
        value, gate = h.chunk(2, dim=-1)  # [..., hidden] each
    else:
        gate, value = h.chunk(2, dim=-1)  # [..., hidden] each
    if limit is not None:
        gate = gate.clamp(max=limit)
        value = value.clamp(min=-limit, max=limit)
    if offset:
        value = value + offset
    return act(gate) * value


class Mlp(Sublayer):
    """The feed-forward sub-layer's body: fc1, (a depthwise conv,) the activation (gated or not), fc2."""

    def __init__(self, dim, hidden, act, bias=True, grid=None, dwconv=False, extra_relu=False, dropout=0.0,
                 gated=False, gate_layout="halves", gate_limit=None, value_offset=0.0, hidden_dropout=None,
                 **sublayer):
        super().__init__(dim, **sublayer)
        self.grid = tuple(grid) if grid else None
        self.gated = gated
        self.gate_layout, self.gate_limit, self.value_offset = gate_layout, gate_limit, value_offset
        self.fc1 = Linear(dim, 2 * hidden if gated else hidden, bias=bias)
        self.relu = nn.ReLU() if extra_relu else None
        self.dwconv = Conv2d(hidden, hidden, 3, 1, 1, groups=hidden) if dwconv else None
        self.act = activation(act)
        self.fused = act if fusable(act) and not gated else None  # oneDNN post-ops
        self.fc2 = Linear(hidden, dim, bias=bias)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        self.hidden_drop = hidden_dropout_module(dropout, hidden_dropout)  # after the activation
        trunc_normal_linears(self)
        if self.dwconv is not None:  # PVT v2: fan-out normal init for convolutions
            nn.init.normal_(self.dwconv.weight, std=(2.0 / 9) ** 0.5)
            nn.init.zeros_(self.dwconv.bias)

    def body(self, x):
        if self.dwconv is None and self.fused is not None:
            x = self.fc1.activate(x, self.fused)  # act(fc1(x)): [B, N, C] -> [B, N, hidden]
        elif self.dwconv is None:
            x = self.fc1(x)
        else:
            x = self.fc1.activate(x, "relu") if self.relu is not None else self.fc1(x)
            x = grid_as_image(x, self.grid)  # -> [B, hidden, H, W], channels-last
            x = self.dwconv.activate(x, self.fused) if self.fused is not None else self.dwconv(x)
            x = image_as_tokens(x)  # -> [B, N, hidden]
        if self.gated:
            x = glu(x, self.act, self.gate_layout, self.gate_limit, self.value_offset)  # -> [B, N, hidden]
        elif self.fused is None:
            x = self.act(x)
        if self.hidden_drop is not None:
            x = self.hidden_drop(x)
        x = self.fc2(x)  # -> [B, N, C]
        if self.drop is not None:
            x = self.drop(x)
        return x


class Experts(nn.Module):
    """`count` MLPs as stacked weights, each run over every token. Layout out_in, Hugging Face's
    MixtralExperts / DeepseekV3Experts: fc1 [E, first, C] (its gate_up_proj), fc2 [E, C, hidden]
    (down_proj); in_out, GptOssExperts: fc1 [E, C, first], fc2 [E, hidden, C]. Biases fc1_bias
    [E, first], fc2_bias [E, C]."""

    def __init__(self, count, dim, hidden, act, gated=False, bias=True, dropout=0.0, layout="out_in",
                 gate_layout="halves", gate_limit=None, value_offset=0.0, hidden_dropout=None):
        super().__init__()
        self.gated, self.layout = gated, layout
        self.gate_layout, self.gate_limit, self.value_offset = gate_layout, gate_limit, value_offset
        first = 2 * hidden if gated else hidden
        if layout == "in_out":
            self.fc1 = nn.Parameter(torch.empty(count, dim, first))
            self.fc2 = nn.Parameter(torch.empty(count, hidden, dim))
        else:
            self.fc1 = nn.Parameter(torch.empty(count, first, dim))
            self.fc2 = nn.Parameter(torch.empty(count, dim, hidden))
        self.fc1_bias = nn.Parameter(torch.zeros(count, first)) if bias else None
        self.fc2_bias = nn.Parameter(torch.zeros(count, dim)) if bias else None
        self.act = activation(act)
        self.drop = hidden_dropout_module(dropout, hidden_dropout)  # after the activation
        nn.init.trunc_normal_(self.fc1, std=0.02)  # timm's init for transformer linears
        nn.init.trunc_normal_(self.fc2, std=0.02)

    def forward(self, x):
        """Every expert over x [T, C], or each expert over its own input [T, E, C] -> [T, E, C]."""
        in_out, each = self.layout == "in_out", "e" if x.dim() == 3 else ""
        equation = f"t{each}c,ecf->tef" if in_out else f"t{each}c,efc->tef"
        h = torch.einsum(equation, x, self.fc1)  # [T, C] or [T, E, C] -> [T, E, first]
        if self.fc1_bias is not None:
            h = h + self.fc1_bias
        if self.gated:
            h = glu(h, self.act, self.gate_layout, self.gate_limit, self.value_offset)  # -> [T, E, hidden]
        else:
            h = self.act(h)
        if self.drop is not None:
            h = self.drop(h)
        out = torch.einsum("teh,ehc->tec" if in_out else "teh,ech->tec", h, self.fc2)  # -> [T, E, C]
        return out + self.fc2_bias if self.fc2_bias is not None else out


class SharedExperts(nn.Module):
    """The experts every token goes through, unweighted (DeepSeek-V3's shared_experts): one MLP,
    fc1 [first, C] and fc2 [C, hidden] as Linears, gated as the routed experts are; with
    `output_gate`, its output times sigmoid(gate(x)), gate [1, C] without bias (Qwen2-MoE's
    shared_expert_gate)."""

    def __init__(self, dim, hidden, act, gated=False, bias=True, gate_layout="halves", gate_limit=None,
                 value_offset=0.0, output_gate=False):
        super().__init__()
        self.gated = gated
        self.gate_layout, self.gate_limit, self.value_offset = gate_layout, gate_limit, value_offset
        self.fc1 = Linear(dim, 2 * hidden if gated else hidden, bias=bias)
        self.act = activation(act)
        self.fc2 = Linear(hidden, dim, bias=bias)
        self.gate = Linear(dim, 1, bias=False) if output_gate else None
        trunc_normal_linears(self)

    def forward(self, x):
        h = self.fc1(x)  # [B, N, C] -> [B, N, first]
        if self.gated:
            h = glu(h, self.act, self.gate_layout, self.gate_limit, self.value_offset)  # -> [B, N, hidden]
        else:
            h = self.act(h)
        out = self.fc2(h)  # -> [B, N, C]
        return out if self.gate is None else torch.sigmoid(self.gate(x)) * out  # [B, N, 1] * [B, N, C]


class MixtureOfExperts(Sublayer):
    """The feed-forward sub-layer's body as a mixture of experts (Hugging Face's MixtralSparseMoeBlock,
    DeepseekV3MoE, GptOssMLP): the router (router.py) gives each token's weight for each expert,
    the experts' outputs are summed with those weights, and the shared experts' output (if any)
    added. Dense: every expert runs on every token (weight 0 where not chosen), so that shapes do
    not depend on the routing. `router` returns the logits: a forward hook on it sees them."""

    def __init__(self, dim, hidden, act, experts, top_k, bias=True, dropout=0.0, gated=False, router=None,
                 shared=None, layout="out_in", gate=None, hidden_dropout=None, shared_gate=False, scales_input=False,
                 input_jitter=0.0, **sublayer):
        super().__init__(dim, **sublayer)
        gate = gate or {}
        self.top_k = top_k
        self.scales_input = scales_input  # the weights multiply each expert's input (Llama 4), not its output
        self.input_jitter = input_jitter  # training: the tokens times uniform noise, twice (PhiMoE's input_jitter_noise)
        self.router = Router(dim, experts, top_k, **(router or {}))
        self.experts = Experts(experts, dim, hidden, act, gated, bias, dropout, layout, **gate,
                               hidden_dropout=hidden_dropout)
        self.shared = SharedExperts(dim, shared * hidden, act, gated, bias, **gate,
                                    **({"output_gate": True} if shared_gate else {})) if shared else None
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        trunc_normal_linears(self)  # the router (an nn.Linear), after the experts: the same seed, the same weights

    def route(self, x):
        """Each token's weight for each expert, in float32: [T, C] -> [T, E], 0 where not chosen."""
        return self.router.weights(self.router(x))

    def body(self, x):
        if self.training and self.input_jitter > 0:  # PhiMoE: its MoE block's noise, then its router's
            x = x * torch.empty_like(x).uniform_(1.0 - self.input_jitter, 1.0 + self.input_jitter)
            x = x * torch.empty_like(x).uniform_(1.0 - self.input_jitter, 1.0 + self.input_jitter)
        tokens = x.reshape(-1, x.shape[-1])  # [B, N, C] -> [T, C]
        if self.scales_input:  # each expert over its weight times the token, in the token's dtype (Llama 4)
            weighted = tokens[:, None, :] * self.route(tokens)[..., None].to(tokens.dtype)  # [T, E, C]
            mixed = self.experts(weighted).sum(1)  # [T, E, C] -> [T, C]
        else:
            mixed = (self.experts(tokens) * self.route(tokens)[..., None]).sum(1)  # [T, E, C] -> [T, C]
        out = mixed.to(x.dtype).reshape(x.shape)  # -> [B, N, C]
        if self.shared is not None:
            out = out + self.shared(x)
        return self.drop(out) if self.drop is not None else out


def hidden_dropout_module(dropout: float, hidden_dropout: float | None):
    """The dropout after the activation: `hidden_dropout`'s rate, `dropout`'s where it is None."""
    rate = dropout if hidden_dropout is None else hidden_dropout
    return nn.Dropout(rate) if rate > 0 else None


@lowering(MLP)
def lower(p, inputs, ctx):
    x = inputs[0]
    hidden_drop = {"hidden_dropout": p.hidden_dropout} if p.hidden_dropout is not None else {}
    if p.experts is not None:
        return make(MixtureOfExperts, dim=x.channels, hidden=hidden_of(p, x.channels), act=p.act,
                    experts=p.experts, top_k=p.top_k, bias=p.bias, dropout=p.dropout, gated=p.gated,
                    **moe_args(p), **hidden_drop, **sublayer_args(p))
    return make(Mlp, dim=x.channels, hidden=hidden_of(p, x.channels), act=p.act, bias=p.bias, grid=x.grid,
                dwconv=p.dwconv, extra_relu=p.extra_relu, dropout=p.dropout, gated=p.gated, **gate_args(p),
                **hidden_drop, **sublayer_args(p))


def gate_args(p) -> dict:
    """The gate's options that differ from their defaults (so a plain SwiGLU's module is made as before)."""
    given = {"gate_layout": p.gate_layout, "gate_limit": p.gate_limit, "value_offset": p.value_offset}
    return {k: v for k, v in given.items() if v != GATE_OPTIONS[k]}


def moe_args(p) -> dict:
    """The router's, shared experts', layout's and gate's arguments of MixtureOfExperts, those
    that differ from their defaults."""
    router = {"score": p.router_score, "bias": p.router_bias, "correction": p.router_correction,
              "groups": p.router_groups, "top_groups": p.router_top_groups, "group_score": p.router_group_score,
              "normalize": p.router_normalize,
              "scale": p.router_scale}
    router = {k: v for k, v in router.items() if v != ROUTER_OPTIONS["router_" + k]}
    if p.router_score == "sparsemixer":
        router["jitter"] = p.router_jitter
    args = {"router": router, "shared": p.shared_experts, "layout": p.experts_layout, "gate": gate_args(p),
            "shared_gate": p.shared_gate, "scales_input": p.router_scales == "input",
            "input_jitter": p.router_input_jitter}
    return {k: v for k, v in args.items() if v not in ({}, None, "out_in", False, 0.0)}


def onnx_fusion(p):
    """ONNX Runtime fuses fc1's bias and a GELU into one BiasGelu (erf) or FastGelu (tanh) when nothing comes
    between them: not gated, no depthwise conv (it fuses no conv with a GELU), not experts; without a
    bias there is nothing to fuse (the GELU is already one op)."""
    fusable = p.act in ("gelu", "gelu_tanh") and p.bias and not p.gated and not p.dwconv and p.experts is None
    return "gelu" if fusable else None


register_facts(MLP, grid=KEEPS, classifier=None, resample=None)
