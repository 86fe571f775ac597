"""Element-wise activations by name (the mlp's `act`, the activation op's `fn`, poolers)."""

from __future__ import annotations

import torch
import torch.nn as nn


class QuickGELU(nn.Module):
    """CLIP's activation: x * sigmoid(1.702 x)."""

    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


def activation_class(name: str):
    """(module class, its keyword arguments) of an activation: gelu (erf), gelu_tanh,
    quick_gelu, relu, silu, tanh or sigmoid."""
    if name == "gelu":
        return nn.GELU, {}
    if name == "gelu_tanh":
        return nn.GELU, {"approximate": "tanh"}
    if name == "quick_gelu":
        return QuickGELU, {}
    if name == "silu":
        return nn.SiLU, {}
    if name == "tanh":
        return nn.Tanh, {}
    if name == "sigmoid":
        return nn.Sigmoid, {}
    return nn.ReLU, {}


def activation(name: str) -> nn.Module:
    cls, kwargs = activation_class(name)
    return cls(**kwargs)
