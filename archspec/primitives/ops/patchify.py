"""patchify: image -> token grid.

A convolution with kernel = stride = patch (ViT, Swin, PVT v1), or an overlapping one with
kernel/stride/padding (PVT v2's 7/4/3), then an optional LayerNorm, optional class token and
a position embedding (learned, 2-D sin-cos, or none). It also reads a token grid without
class tokens, which it treats as an image (PVT v1's per-stage patch embeddings).

The 2-D sin-cos table is fixed: by default a buffer made at build time (not in the state dict,
not a parameter); with `pos_frozen: true`, a parameter `pos_embed` that never trains
(requires_grad False), as MAE keeps it (HF's ViTMAE, the MAE reference): counted in the
parameters (not in the trainable ones), saved in the state dict and loaded from a checkpoint.
"""

from __future__ import annotations

from typing import Literal, Union

from ...core.declared import Field
from ...core.suggestions import Divides, InputMultiple, Remedy
from ...core.types import TensorType, grid_tokens
from ..base import Cost, Eps, NonNegInt, Op, Params, PositiveInt, Rate, RuleError
from ..counting import FLOAT_BYTES, norm_params
from ..grids import as_image, conv_grid, divisors
from ..registry import register
from ..dtypes import READS, FLOAT_FIRST
from ..decoding import Mixes, register_decoding


class PatchifyParams(Params):
    dim: PositiveInt = Field(description="width of the tokens")
    patch: PositiveInt | None = Field(None, description="non-overlapping patch size (kernel = stride = patch)")
    kernel: PositiveInt | None = Field(None, description="overlapping patches: convolution kernel")
    stride: PositiveInt | None = Field(None, description="overlapping patches: convolution stride")
    padding: NonNegInt = 0
    bias: bool = True
    norm: bool = Field(False, description="LayerNorm the tokens after the convolution")
    norm_kind: Literal["layer", "rms"] = Field(
        "layer", description="with norm: a LayerNorm (layer) or an RMSNorm (rms: AIMv2's patch embedding)")
    norm_eps: Eps = 1e-5
    cls_token: Union[bool, NonNegInt] = Field(
        False, description="prepend learned prefix tokens: true (one class token) or a count (2: class and "
                           "distillation tokens, as DeiT)")
    pos: Literal["learned", "sincos", "none"] = "none"
    pos_frozen: bool = Field(False, description="with pos: sincos, the fixed table is a parameter that never "
                                                "trains (requires_grad False; in the state dict, as MAE's), "
                                                "not a buffer")
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


def check_conv_geometry(kernel: int, stride: int, padding: int) -> None:
    """A strided convolution that reads every pixel, and no patch of padding alone: a stride larger
    than the kernel skips the pixels between patches; a padding as large as the kernel makes the
    border patches read padding only (their tokens carry no image at all)."""
    if stride > kernel:
        raise RuleError(f"stride {stride} is larger than the kernel {kernel}: the pixels between the patches are "
                        "never read", field="stride",
                        hint=Remedy(f"use a stride of at most {kernel} (patch: {kernel} for non-overlapping patches)"))
    if padding >= kernel:
        raise RuleError(f"padding {padding} is not smaller than the kernel {kernel}: the patches at the border "
                        "would read padding only", field="padding",
                        hint=Remedy(f"use a padding below {kernel}; {kernel // 2} (kernel // 2) is the usual one"))


class Patchify(Op):
    """Image (or token grid) -> tokens: conv patches, optional norm, class token, positions."""

    primitive = "patchify"

    def one_grid(self, p) -> str | None:
        return None if p.pos == "none" else "a position table"
    Params = PatchifyParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if "norm_kind" in p.model_fields_set and not p.norm:
            raise RuleError("norm_kind goes with norm: true", field="norm_kind",
                            hint="add norm: true, or drop norm_kind")
        channels, (h, w), origin = as_image(x, "patchify")
        kernel, stride, padding = geometry(p)
        check_conv_geometry(kernel, stride, padding)
        if p.patch is not None and (h % p.patch or w % p.patch):
            bad = h if h % p.patch else w
            candidates = tuple(divisors(bad)[1:-1])
            raise RuleError(f"patch {p.patch} does not divide the {h}x{w} input ({origin})", field="patch",
                            hint=Divides("patch", bad, shown=candidates[-6:], candidates=candidates,
                                         reshapes_weights=True), grid=origin,
                            input=InputMultiple(p.patch))
        grid = conv_grid((h, w), kernel, stride, padding)
        if min(grid) < 1:
            raise RuleError(f"kernel {kernel} is larger than the {h}x{w} input", field="kernel" if p.kernel else "patch",
                            grid=origin)
        if p.pos == "sincos" and p.dim % 4:
            raise RuleError(f"2-D sin-cos positions need a width divisible by 4, got {p.dim}", field="pos")
        if p.pos_frozen and p.pos != "sincos":
            raise RuleError(f"`pos_frozen` freezes the fixed sin-cos table, but pos is {p.pos}", field="pos_frozen",
                            hint=Remedy("use pos: sincos with it, or leave pos_frozen out (a learned table trains)"))
        step = origin.then("patch", p.patch) if p.patch else origin.then("conv", kernel, stride)
        return grid_tokens(grid, p.dim, prefix=int(p.cls_token), origin=step)  # [B, prefix + H*W, dim]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        channels, _, _ = as_image(inputs[0], "patchify")
        kernel, _, _ = geometry(p)
        positions = out.grid[0] * out.grid[1]
        params = channels * kernel * kernel * p.dim + (p.dim if p.bias else 0)
        params += (norm_params(p.dim) if p.norm_kind == "layer" else p.dim) if p.norm else 0  # an RMSNorm: a weight
        params += int(p.cls_token) * p.dim
        params += out.length * p.dim if p.pos == "learned" or p.pos_frozen else 0  # a frozen table is a parameter
        flops = 2 * channels * kernel * kernel * p.dim * positions
        table = out.length * p.dim * FLOAT_BYTES if p.pos == "sincos" and not p.pos_frozen else 0  # the fixed buffer
        return Cost(params, flops, table)


PATCHIFY = register(Patchify())
READS.register(PATCHIFY, FLOAT_FIRST)
register_decoding(PATCHIFY, Mixes("patchify reads an image"))
