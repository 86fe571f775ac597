"""mlp (torch): fc1, activation (after a depthwise conv on the grid for PVT v2), fc2; gated:
fc2(act(a) * b) with [a, b] = fc1(x).

The depthwise conv reads the tokens [B, N, hidden] as a channels-last image (a view, no copy)
and its channels-last output is the tokens again (a view): no transposing copies. In eager CPU
inference the activation is fused into fc1 or the conv (oneDNN post-ops; common.Linear)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.mlp import MLP, hidden_of

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .activations import activation, fusable
from .common import Conv2d, Linear, make, trunc_normal_linears
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
            h, w = self.grid
            x = x.reshape(x.shape[0], h, w, -1).permute(0, 3, 1, 2)  # -> [B, hidden, H, W], channels-last
            x = self.dwconv.activate(x, self.fused) if self.fused is not None else self.dwconv(x)
            x = x.flatten(2).transpose(1, 2)  # -> [B, N, hidden]
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


@lowering(MLP)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(Mlp, dim=x.channels, hidden=hidden_of(p, x.channels), act=p.act, bias=p.bias, grid=x.grid,
                dwconv=p.dwconv, extra_relu=p.extra_relu, dropout=p.dropout, gated=p.gated, **sublayer_args(p))


def onnx_fusion(p):
    """ONNX Runtime fuses fc1's bias and a GELU (erf) into one BiasGelu when nothing comes
    between them: not gated, no depthwise conv (it fuses no conv with a GELU)."""
    return "gelu" if p.act == "gelu" and not p.gated and not p.dwconv else None


register_facts(MLP, grid=KEEPS, fusion=onnx_fusion, head=None)
