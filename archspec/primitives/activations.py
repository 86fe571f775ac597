"""The activation names the language knows, on the rule floor: one table, read by every
parameter model that takes an activation (the activation op's `fn`, the mlp's `act`).

The torch floor keeps the matching table of functions (archspec/compiler/modules/activations.py);
tests/primitives/test_activations.py checks that the two hold the same names, so a name added on one floor
only fails a test instead of building a model that runs something else."""

from __future__ import annotations

from typing import Literal

ACTIVATIONS: dict[str, str] = {  # name -> what it computes (shown in the schema and the docs)
    "gelu": "GELU (erf)",
    "gelu_tanh": "GELU, tanh approximation",
    "quick_gelu": "x * sigmoid(1.702 x) (CLIP)",
    "relu": "ReLU",
    "relu2": "ReLU squared, relu(x)^2 (Primer; Hugging Face's relu2: Nemotron, Persimmon)",
    "silu": "SiLU / swish",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "hardswish": "x * relu6(x + 3) / 6 (MobileNetV3, LeViT)",
    "hardsigmoid": "relu6(x + 3) / 6",
    "sin": "sin (Fourier features of generated coordinates)",
    "cos": "cos",
    "exp": "exp (a scale learned in log space)",
    "abs": "|x|",
    "sign": "sign(x): -1, 0 or 1",
    "round": "round(x) to the nearest integer, ties to even (torch.round: a quantizer's codes, BitNet's); its "
             "gradient is 0",
    "log1p": "log(1 + x) (with abs and sign, timm's RelPosMlp coordinates sign(x) log(1 + |x|))",
    "softplus": "log(1 + exp(x)), linear above 20 (torch's F.softplus: TimesFM's per-dimension query scale)",
    "log": "log(x) (natural)",
    "elu": "x above 0, exp(x) - 1 below (torch's ELU, alpha 1: OWL-ViT's logit scale, elu + 1)",
    "leaky_relu": "x above 0, 0.01 x below (torch's LeakyReLU at its default slope: Swin2SR's upsampler)",
    "star_relu": "s * relu(x)^2 + b, s and b learned scalars starting at 1 and 0 (timm's StarReLU: MetaFormer, "
                 "CAFormer, ConvFormer)",
    "xielu": "xIELU (Hugging Face's XIELUActivation: Apertus): a_p x^2 + beta x above 0, (expm1(min(x, eps)) - x) "
             "a_n + beta x below, a_p = softplus(alpha_p), a_n = beta + softplus(alpha_n); alpha_p and alpha_n "
             "learned scalars starting where a_p and a_n are 0.8, beta 0.5 and eps -1e-6 buffers",
}

# the learned parameters each activation holds (the rest hold none): counted where it is used
LEARNED: dict[str, int] = {"star_relu": 2, "xielu": 2}

# those an mlp's `act` takes
MLP_ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "relu", "relu2", "silu", "hardswish", "star_relu", "xielu")


def learned_params(name: str) -> int:
    """The learned parameters an activation holds (star_relu's scale and bias)."""
    return LEARNED.get(name, 0)

Function = Literal[tuple(ACTIVATIONS)]  # type: ignore[valid-type]
MlpActivation = Literal[MLP_ACTIVATIONS]  # type: ignore[valid-type]


def described(names=None) -> str:
    """'gelu, gelu_tanh, ...' for a parameter's description."""
    return ", ".join(names or ACTIVATIONS)
