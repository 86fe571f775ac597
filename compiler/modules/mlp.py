"""mlp (torch): fc1, activation (after a depthwise conv on the grid for PVT v2), fc2; gated:
fc2(act(a) * b) with [a, b] = fc1(x); with experts, a mixture of such MLPs routed per token (Mixtral).

The depthwise conv reads the tokens [B, N, hidden] as a channels-last image (a view, no copy)
and its channels-last output is the tokens again (a view): no transposing copies. In eager CPU
inference the activation is fused into fc1 or the conv (oneDNN post-ops; common.Linear)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.mlp import MLP, hidden_of

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .activations import activation, fusable
from .common import Conv2d, Linear, grid_as_image, image_as_tokens, make, trunc_normal_linears
from .sublayer import Sublayer, sublayer_args


class Mlp(Sublayer):
    """The feed-forward sub-layer's body: fc1, (a depthwise conv,) the activation (gated or not), fc2."""

    def __init__(self, dim, hidden, act, bias=True, grid=None, dwconv=False, extra_relu=False, dropout=0.0,
                 gated=False, **sublayer):
        super().__init__(dim, **sublayer)
        self.grid = tuple(grid) if grid else None
        self.gated = gated
        self.fc1 = Linear(dim, 2 * hidden if gated else hidden, bias=bias)
        self.relu = nn.ReLU() if extra_relu else None
        self.dwconv = Conv2d(hidden, hidden, 3, 1, 1, groups=hidden) if dwconv else None
        self.act = activation(act)
        self.fused = act if fusable(act) and not gated else None  # oneDNN post-ops
        self.fc2 = Linear(hidden, dim, bias=bias)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
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
            gate, value = x.chunk(2, dim=-1)  # [B, N, 2 hidden] -> 2 x [B, N, hidden]
            x = self.act(gate) * value
        elif self.fused is None:
            x = self.act(x)
        if self.drop is not None:
            x = self.drop(x)
        x = self.fc2(x)  # -> [B, N, C]
        if self.drop is not None:
            x = self.drop(x)
        return x


class Experts(nn.Module):
    """`count` MLPs as stacked weights, each run over every token; Hugging Face's MixtralExperts
    layout: fc1 [E, first, C] (its gate_up_proj, the gate half first), fc2 [E, C, hidden] (down_proj)."""

    def __init__(self, count, dim, hidden, act, gated=False, bias=True, dropout=0.0):
        super().__init__()
        self.gated = gated
        first = 2 * hidden if gated else hidden
        self.fc1 = nn.Parameter(torch.empty(count, first, dim))
        self.fc2 = nn.Parameter(torch.empty(count, dim, hidden))
        self.fc1_bias = nn.Parameter(torch.zeros(count, first)) if bias else None
        self.fc2_bias = nn.Parameter(torch.zeros(count, dim)) if bias else None
        self.act = activation(act)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        nn.init.trunc_normal_(self.fc1, std=0.02)  # timm's init for transformer linears
        nn.init.trunc_normal_(self.fc2, std=0.02)

    def forward(self, x):
        h = torch.einsum("tc,efc->tef", x, self.fc1)  # [T, C] -> [T, E, first]
        if self.fc1_bias is not None:
            h = h + self.fc1_bias
        if self.gated:
            gate, value = h.chunk(2, dim=-1)  # [T, E, 2 hidden] -> 2 x [T, E, hidden]
            h = self.act(gate) * value
        else:
            h = self.act(h)
        if self.drop is not None:
            h = self.drop(h)
        out = torch.einsum("teh,ech->tec", h, self.fc2)  # -> [T, E, C]
        return out + self.fc2_bias if self.fc2_bias is not None else out


class MixtureOfExperts(Sublayer):
    """The feed-forward sub-layer's body as a mixture of experts (Hugging Face's MixtralSparseMoeBlock):
    a router scores the experts per token, softmax in float32, the top_k kept and renormalised,
    and the experts' outputs are summed with those weights. Dense: every expert runs on every
    token (weight 0 where not chosen), so that shapes do not depend on the routing."""

    def __init__(self, dim, hidden, act, experts, top_k, bias=True, dropout=0.0, gated=False, **sublayer):
        super().__init__(dim, **sublayer)
        self.top_k = top_k
        self.router = Linear(dim, experts, bias=False)
        self.experts = Experts(experts, dim, hidden, act, gated, bias, dropout)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        trunc_normal_linears(self)

    def route(self, x):
        """Each token's weight for each expert, in float32: the top_k probabilities renormalised, 0 elsewhere."""
        probs = self.router(x).float().softmax(-1)  # [T, C] -> [T, E]
        top, chosen = probs.topk(self.top_k, dim=-1)  # -> 2 x [T, k]
        return torch.zeros_like(probs).scatter(-1, chosen, top / top.sum(-1, keepdim=True))  # -> [T, E]

    def body(self, x):
        tokens = x.reshape(-1, x.shape[-1])  # [B, N, C] -> [T, C]
        mixed = (self.experts(tokens) * self.route(tokens)[..., None]).sum(1)  # [T, E, C] -> [T, C]
        out = mixed.to(x.dtype).reshape(x.shape)  # -> [B, N, C]
        return self.drop(out) if self.drop is not None else out


@lowering(MLP)
def lower(p, inputs, ctx):
    x = inputs[0]
    if p.experts is not None:
        return make(MixtureOfExperts, dim=x.channels, hidden=hidden_of(p, x.channels), act=p.act,
                    experts=p.experts, top_k=p.top_k, bias=p.bias, dropout=p.dropout, gated=p.gated,
                    **sublayer_args(p))
    return make(Mlp, dim=x.channels, hidden=hidden_of(p, x.channels), act=p.act, bias=p.bias, grid=x.grid,
                dwconv=p.dwconv, extra_relu=p.extra_relu, dropout=p.dropout, gated=p.gated, **sublayer_args(p))


def onnx_fusion(p):
    """ONNX Runtime fuses fc1's bias and a GELU into one BiasGelu (erf) or FastGelu (tanh) when nothing comes
    between them: not gated, no depthwise conv (it fuses no conv with a GELU), not experts."""
    return "gelu" if p.act in ("gelu", "gelu_tanh") and not p.gated and not p.dwconv and p.experts is None else None


register_facts(MLP, grid=KEEPS, head=None)
