"""Element-wise activations by name (the mlp's `act`, the activation op's `fn`, poolers, the
activation fused into a Linear or a Conv2d): one table, TORCH_ACTIVATIONS, read for the module,
the functional form and oneDNN's fused post-op. Its names are the rule floor's
(archspec/primitives/activations.py, tests/primitives/test_activations.py); a name it lacks raises.

Like every module here, it uses only torch, nn and F: model.py copies it (the table included)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

NO_ACTIVATION = "none"  # Linear.activate / Conv2d.activate without an activation


def quick_gelu(x):
    """CLIP's activation: x * sigmoid(1.702 x)."""
    return x * torch.sigmoid(1.702 * x)


class QuickGELU(nn.Module):
    """CLIP's activation: x * sigmoid(1.702 x)."""

    def forward(self, x):
        return quick_gelu(x)


def relu_squared(x):
    """relu(x)^2 (Primer; Hugging Face's relu2)."""
    return torch.square(F.relu(x))


class ReLUSquared(nn.Module):
    """relu(x)^2."""

    def forward(self, x):
        return relu_squared(x)


class Sin(nn.Module):
    """sin(x): Fourier features of generated coordinates (XCiT's positions)."""

    def forward(self, x):
        return torch.sin(x)


class Cos(nn.Module):
    """cos(x)."""

    def forward(self, x):
        return torch.cos(x)


class Exp(nn.Module):
    """exp(x): a scale learned in log space (CLIP's logit_scale)."""

    def forward(self, x):
        return torch.exp(x)


class Abs(nn.Module):
    """|x|."""

    def forward(self, x):
        return torch.abs(x)


class Sign(nn.Module):
    """sign(x)."""

    def forward(self, x):
        return torch.sign(x)


class Round(nn.Module):
    """round(x), ties to even (torch.round); no gradient passes it."""

    def forward(self, x):
        return torch.round(x)


class Log1p(nn.Module):
    """log(1 + x): log-spaced relative coordinates (timm's RelPosMlp), with abs and sign."""

    def forward(self, x):
        return torch.log1p(x)


class Log(nn.Module):
    """log(x), the natural logarithm."""

    def forward(self, x):
        return torch.log(x)


class StarReLU(nn.Module):
    """s * relu(x)^2 + b, s and b learned scalars [1] starting at 1 and 0 (timm's StarReLU)."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return self.scale * F.relu(x) ** 2 + self.bias


class XIELU(nn.Module):
    """xIELU (Hugging Face's XIELUActivation, its Python form): softplus(alpha_p) x^2 + beta x above 0,
    (expm1(min(x, eps)) - x) (beta + softplus(alpha_n)) + beta x below; alpha_p and alpha_n learned
    [1], beta and eps buffers as Hugging Face's state dict holds them."""

    def __init__(self, alpha_p=0.8, alpha_n=0.8, beta=0.5, eps=-1e-6):
        super().__init__()
        self.alpha_p = nn.Parameter(torch.log(torch.expm1(torch.tensor(alpha_p))).unsqueeze(0))  # [1]
        self.alpha_n = nn.Parameter(torch.log(torch.expm1(torch.tensor(alpha_n - beta))).unsqueeze(0))  # [1]
        self.register_buffer("beta", torch.tensor(beta))
        self.register_buffer("eps", torch.tensor(eps))

    def forward(self, x):
        alpha_p = F.softplus(self.alpha_p)
        alpha_n = self.beta + F.softplus(self.alpha_n)
        return torch.where(x > 0, alpha_p * x * x + self.beta * x,
                           (torch.expm1(torch.minimum(x, self.eps)) - x) * alpha_n + self.beta * x)


TORCH_ACTIVATIONS = {  # name -> (module class, the functional it computes, their keyword arguments, oneDNN's post-op)
    "gelu": (nn.GELU, F.gelu, {}, ("gelu", "none")),  # erf
    "gelu_tanh": (nn.GELU, F.gelu, {"approximate": "tanh"}, ("gelu", "tanh")),
    "quick_gelu": (QuickGELU, quick_gelu, {}, None),  # None: oneDNN fuses no such post-op
    "relu": (nn.ReLU, F.relu, {}, ("relu", "")),
    "relu2": (ReLUSquared, relu_squared, {}, None),
    "silu": (nn.SiLU, F.silu, {}, None),
    "tanh": (nn.Tanh, torch.tanh, {}, None),
    "sigmoid": (nn.Sigmoid, torch.sigmoid, {}, None),
    "hardswish": (nn.Hardswish, F.hardswish, {}, None),
    "hardsigmoid": (nn.Hardsigmoid, F.hardsigmoid, {}, None),
    "sin": (Sin, torch.sin, {}, None),
    "cos": (Cos, torch.cos, {}, None),
    "exp": (Exp, torch.exp, {}, None),
    "abs": (Abs, torch.abs, {}, None),
    "sign": (Sign, torch.sign, {}, None),
    "round": (Round, torch.round, {}, None),
    "log1p": (Log1p, torch.log1p, {}, None),
    "softplus": (nn.Softplus, F.softplus, {}, None),
    "log": (Log, torch.log, {}, None),
    "elu": (nn.ELU, F.elu, {}, None),
    "leaky_relu": (nn.LeakyReLU, F.leaky_relu, {}, None),
    "star_relu": (StarReLU, None, {}, None),  # learned scalars: a module, no functional
    "xielu": (XIELU, None, {}, None),
}


def torch_activation(name: str):
    """(module class, functional, keyword arguments, oneDNN post-op) of an activation."""
    entry = TORCH_ACTIVATIONS.get(name)
    if entry is None:
        raise KeyError(f"no activation named {name!r} on the torch floor (known: {', '.join(TORCH_ACTIVATIONS)})")
    return entry


def activation_class(name: str):
    """(module class, its keyword arguments) of an activation."""
    cls, _, kwargs, _ = torch_activation(name)
    return cls, kwargs


def activation(name: str) -> nn.Module:
    cls, kwargs = activation_class(name)
    return cls(**kwargs)


def fusable(name: str) -> bool:
    """Whether oneDNN fuses the activation into a linear or a convolution (a post-op)."""
    return torch_activation(name)[3] is not None


def onednn_activation(fn: str):
    """(attr, algorithm) of oneDNN's fused post-op for an activation name (or NO_ACTIVATION)."""
    if fn == NO_ACTIVATION:
        return "none", ""
    post_op = torch_activation(fn)[3]
    if post_op is None:
        raise ValueError(f"oneDNN fuses no {fn} into a linear or a convolution")
    return post_op


def apply_activation(x, fn: str):
    """fn(x) by the functional form (x itself for NO_ACTIVATION)."""
    if fn == NO_ACTIVATION:
        return x
    _, functional, kwargs, _ = torch_activation(fn)
    return functional(x, **kwargs)


def same_names(rule_names, torch_names) -> None:
    """Raise naming every activation one floor knows and the other does not."""
    only_rules, only_torch = sorted(set(rule_names) - set(torch_names)), sorted(set(torch_names) - set(rule_names))
    if only_rules or only_torch:
        raise KeyError(f"activations on one floor only: rule floor {only_rules}, torch floor {only_torch}")
