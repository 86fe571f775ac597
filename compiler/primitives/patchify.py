"""patchify: image -> token grid.

A convolution with kernel = stride = patch (ViT, Swin, PVT v1), or an overlapping one with
kernel/stride/padding (PVT v2's 7/4/3), then an optional LayerNorm, optional class token and
a position embedding (learned, 2-D sin-cos, or none). It also reads a token grid without
class tokens, which it treats as an image (PVT v1's per-stage patch embeddings).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..registry import (Cost, Eps, NonNegInt, Params, PositiveInt, Primitive, Rate, RuleError, divisors,
                        norm_params, one_input, plural, register)
from ..types import TensorType, grid_tokens


class PatchifyParams(Params):
    dim: PositiveInt = Field(description="width of the tokens")
    patch: PositiveInt | None = Field(None, description="non-overlapping patch size (kernel = stride = patch)")
    kernel: PositiveInt | None = Field(None, description="overlapping patches: convolution kernel")
    stride: PositiveInt | None = Field(None, description="overlapping patches: convolution stride")
    padding: NonNegInt = 0
    bias: bool = True
    norm: bool = Field(False, description="LayerNorm the tokens after the convolution")
    norm_eps: Eps = 1e-5
    cls_token: bool = Field(False, description="prepend a learned class token")
    pos: Literal["learned", "sincos", "none"] = "none"
    dropout: Rate = 0.0


def geometry(p: PatchifyParams) -> tuple[int, int, int]:
    """(kernel, stride, padding) of the convolution."""
    if p.patch is not None:
        if p.kernel is not None or p.stride is not None:
            raise RuleError("give either `patch` or `kernel` and `stride`, not both", field="patch")
        return p.patch, p.patch, p.padding
    if p.kernel is None or p.stride is None:
        raise RuleError("patchify needs `patch` (non-overlapping) or `kernel` and `stride` (overlapping)",
                        hint="ViT: patch: 16; PVT v2: kernel: 7, stride: 4, padding: 3")
    return p.kernel, p.stride, p.padding


def conv_grid(size: tuple[int, int], kernel: int, stride: int, padding: int) -> tuple[int, int]:
    return tuple((s + 2 * padding - kernel) // stride + 1 for s in size)  # type: ignore[return-value]


def as_image(x: TensorType, what: str) -> tuple[int, tuple[int, int], tuple[str, ...]]:
    """(channels, (H, W), trace) of an image, or of a token grid read as an image."""
    if x.layout == "image":
        h, w = x.shape[2], x.shape[3]
        trace = x.trace or (f"image {h}" if h == w else f"image {h}x{w}",)
        return x.channels, (h, w), trace
    if x.layout == "tokens" and x.grid and not x.prefix:
        return x.channels, x.grid, x.trace
    if x.layout == "tokens" and x.prefix:
        raise RuleError(f"{what} needs a token grid without class tokens; these tokens have "
                        f"{plural(x.prefix, 'class token')}")
    raise RuleError(f"{what} needs an image or a token grid, got {x.layout_name()}")


def infer(p: PatchifyParams, inputs: list[TensorType], ctx) -> TensorType:
    (x,) = inputs
    channels, (h, w), trace = as_image(x, "patchify")
    kernel, stride, padding = geometry(p)
    if p.patch is not None and (h % p.patch or w % p.patch):
        bad = h if h % p.patch else w
        fits = [d for d in divisors(bad) if 1 < d < bad][-6:]
        raise RuleError(f"patch {p.patch} does not divide the {h}x{w} input ({' / '.join(trace)})",
                        hint=f"use a patch that divides {bad} ({', '.join(map(str, fits))}) "
                             f"or an input that is a multiple of {p.patch}", field="patch")
    grid = conv_grid((h, w), kernel, stride, padding)
    if min(grid) < 1:
        raise RuleError(f"kernel {kernel} is larger than the {h}x{w} input", field="kernel" if p.kernel else "patch")
    if p.pos == "sincos" and p.dim % 4:
        raise RuleError(f"2-D sin-cos positions need a width divisible by 4, got {p.dim}", field="pos")
    step = f"patch {p.patch}" if p.patch else f"conv {kernel}/{stride}"
    return grid_tokens(grid, p.dim, prefix=int(p.cls_token), trace=trace + (step,))  # [B, prefix + H*W, dim]


def cost(p: PatchifyParams, inputs: list[TensorType], out: TensorType) -> Cost:
    channels, _, _ = as_image(inputs[0], "patchify")
    kernel, _, _ = geometry(p)
    positions = out.grid[0] * out.grid[1]
    params = channels * kernel * kernel * p.dim + (p.dim if p.bias else 0)
    params += norm_params(p.dim) if p.norm else 0
    params += p.dim if p.cls_token else 0
    params += out.length * p.dim if p.pos == "learned" else 0
    flops = 2 * channels * kernel * kernel * p.dim * positions
    return Cost(params, flops)


PRIMITIVE = register(Primitive("patchify", PatchifyParams, infer, cost, one_input, doc=__doc__))
