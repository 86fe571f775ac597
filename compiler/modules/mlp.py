"""mlp (torch): fc1, activation (after a depthwise conv on the grid for PVT v2), fc2."""

from __future__ import annotations

import torch
import torch.nn as nn

from ..primitives.mlp import hidden_of
from .common import Emitter, emit_sublayer, make, register_lowering, trunc_normal_linears


class QuickGELU(nn.Module):
    """CLIP's activation: x * sigmoid(1.702 x)."""

    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


def activation(name: str) -> nn.Module:
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    if name == "quick_gelu":
        return QuickGELU()
    return nn.ReLU()


class Mlp(nn.Module):
    def __init__(self, dim, hidden, act, bias=True, grid=None, dwconv=False, extra_relu=False, dropout=0.0):
        super().__init__()
        self.grid = tuple(grid) if grid else None
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.relu = nn.ReLU() if extra_relu else None
        self.dwconv = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden) if dwconv else None
        self.act = activation(act)
        self.fc2 = nn.Linear(hidden, dim, bias=bias)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        trunc_normal_linears(self)
        if self.dwconv is not None:  # PVT v2: fan-out normal init for convolutions
            nn.init.normal_(self.dwconv.weight, std=(2.0 / 9) ** 0.5)
            nn.init.zeros_(self.dwconv.bias)

    def forward(self, x):
        x = self.fc1(x)  # [B, N, C] -> [B, N, hidden]
        if self.dwconv is not None:
            h, w = self.grid
            x = x.transpose(1, 2).reshape(x.shape[0], -1, h, w)  # -> [B, hidden, H, W]
            if self.relu is not None:
                x = self.relu(x)
            x = self.dwconv(x)
            x = x.flatten(2).transpose(1, 2)  # -> [B, N, hidden]
        x = self.act(x)
        if self.drop is not None:
            x = self.drop(x)
        x = self.fc2(x)  # -> [B, N, C]
        if self.drop is not None:
            x = self.drop(x)
        return x


@register_lowering("mlp")
def lower(node, inputs, emit: Emitter, args):
    p = node.params
    width = inputs[0].channels
    body = make(Mlp, dim=width, hidden=hidden_of(p, width), act=p.act, bias=p.bias, grid=inputs[0].grid,
                dwconv=p.dwconv, extra_relu=p.extra_relu, dropout=p.dropout)
    return emit_sublayer(emit, body, p, width, *args)

