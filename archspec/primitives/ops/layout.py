"""The layout family: ops that move values between an image [B, C, H, W] and tokens on a grid
[B, H*W, C], or change an image's height and width, computing nothing (none has parameters
or counted FLOPs: each says `cost = no_cost`).

    to_image   tokens on a grid -> an image [B, C, H, W] (e.g. SegFormer's stage outputs)
    to_tokens  an image [B, C, H, W] -> tokens [B, H*W, C] on the HxW grid
    resize     an image brought to a given height and width by interpolation (nearest, bilinear
               or bicubic), as torch's F.interpolate(x, size=...): CrossViT's second branch sees
               its 240x240 image at 224x224, bicubic
    upsample   an image scaled up by an integer factor (nearest or bilinear), e.g. the feature
               maps of a segmentation decoder brought to one size

`on_grid` gives pad's and pool's output (ops/pad.py, ops/pool.py): the layout they read, on
the new grid.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from ...core.declared import Field
from ...core.suggestions import GridOrigin
from ...core.types import TensorType, grid_tokens, image
from ..base import NoParams, Op, Params, PositiveInt, PositiveSize, RuleError, no_cost, not_image_hint, size_pair
from ..decoding import Mixes, register_decoding
from ..grids import image_origin
from ..registry import register
from ..dtypes import READS, ANY, FLOATS


def on_grid(x: TensorType, channels: int, grid: tuple, origin: GridOrigin) -> TensorType:
    """An op's output in the layout of its input `x` (an image, or a token grid read as one) on
    the new (H', W') `grid`."""
    if x.layout == "image":
        return image(channels, grid[0], grid[1], origin=origin)  # [B, C, H', W']
    return grid_tokens(grid, channels, origin=origin)  # [B, H'W', C]


class Relayout(Op):
    """to_image and to_tokens: the same values in another layout (no parameters, no cost)."""

    Params = NoParams
    cost = no_cost
    reads_layout: ClassVar[str]  # the layout it reads, in words

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if not self.fits(x):
            raise RuleError(f"{self.primitive} reads {self.reads_layout}, got {x.layout_name()}")
        return self.relaid(x)


class ToImageOp(Relayout):
    """[B, H*W, C] on an HxW grid -> [B, C, H, W]."""

    primitive = "to_image"
    reads_layout = "tokens on a grid"

    def fits(self, x: TensorType) -> bool:
        return x.layout == "tokens" and bool(x.grid)

    def relaid(self, x: TensorType) -> TensorType:
        if x.prefix:
            raise RuleError(f"to_image needs the grid tokens alone; these have {x.prefix} prefix token(s)",
                            hint=f"slice them off first: `slice: {{start: {x.prefix}}}`")
        return image(x.channels, x.grid[0], x.grid[1], origin=x.origin)  # [B, N, C] -> [B, C, H, W]


class ToTokensOp(Relayout):
    """[B, C, H, W] -> [B, H*W, C] on an HxW grid."""

    primitive = "to_tokens"
    reads_layout = "an image"

    def fits(self, x: TensorType) -> bool:
        return x.layout == "image"

    def relaid(self, x: TensorType) -> TensorType:
        return grid_tokens((x.shape[2], x.shape[3]), x.channels, origin=image_origin(x))  # [B, HW, C]


# -- interpolation: an image to a new height and width ------------------------------------------------


class ResizeParams(Params):
    size: PositiveSize | None = Field(None, description="the new height and width: an int (square), or [h, w]")
    like: bool = Field(False, description="true: the height and width of the second input, an image (Hugging "
                                          "Face's interpolate(x, size=other.shape[2:]): DPT's fusion residuals); "
                                          "they follow that image's size when the program's size is dynamic")
    mode: Literal["nearest", "bilinear", "bicubic"] = "bilinear"
    align_corners: bool = Field(False, description="bilinear, bicubic: align the corner pixels (torch's align_corners)")
    antialias: bool = Field(False, description="bilinear, bicubic: torch's antialias (it changes bicubic upsampling "
                                               "too: timm's resample_abs_pos_embed, Hiera's window positions)")


class UpsampleParams(Params):
    factor: PositiveInt = Field(description="the height and width are multiplied by this")
    mode: Literal["nearest", "bilinear"] = "nearest"
    align_corners: bool = Field(False, description="bilinear: align the corner pixels (torch's align_corners)")


class Interpolation(Op):
    """An image interpolated to a new height and width (`size`), in a `mode` that takes
    `align_corners` unless it is nearest."""

    smooth_modes: ClassVar[str]  # the modes that take align_corners, in words
    cost = no_cost  # FlopCounterMode counts no FLOPs for an interpolation

    def size(self, p, height, width) -> tuple:
        raise NotImplementedError

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "image":
            raise RuleError(f"{self.primitive} reads an image, got {x.layout_name()}",
                            hint=not_image_hint(x))
        for name in ("align_corners", "antialias"):
            if getattr(p, name, False) and p.mode == "nearest":
                raise RuleError(f"{name} goes with mode: {self.smooth_modes}", field=name)
        height, width = self.size(p, x.shape[2], x.shape[3])
        return image(x.channels, height, width)  # [B, C, H, W] -> [B, C, h, w]


class ResizeOp(Interpolation):
    """[B, C, H, W] -> [B, C, h, w]."""

    primitive = "resize"
    Params = ResizeParams
    smooth_modes = "bilinear or bicubic"

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "like") if p.like else ("x",)

    def one_grid(self, p) -> str | None:
        return None if p.like else "a fixed size"

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        if p.like == (p.size is not None):
            raise RuleError("resize takes `size` or `like: true`, one of them", field="size",
                            hint="size: [h, w] for a fixed size; like: true (from: [x, other]) for other's")
        out = super().shape(p, inputs[:1], ctx)
        if not p.like:
            return out
        other = inputs[1]
        if other.layout != "image":
            raise RuleError(f"like: true takes its height and width from an image, got {other.layout_name()}",
                            field="from", hint=not_image_hint(other))
        return image(out.channels, other.shape[2], other.shape[3])  # [B, C, H, W] -> [B, C, H', W'] of other

    def size(self, p, height, width) -> tuple:
        return size_pair(p.size) if not p.like else (height, width)  # like: shape() takes the other image's


class UpsampleOp(Interpolation):
    """[B, C, H, W] -> [B, C, H*f, W*f]."""

    primitive = "upsample"
    Params = UpsampleParams
    smooth_modes = "bilinear"

    def size(self, p, height, width) -> tuple:
        return height * p.factor, width * p.factor  # [B, C, H*f, W*f]


TO_IMAGE = register_decoding(register(ToImageOp()), Mixes("to_image reads the tokens as an image"))
READS.register(TO_IMAGE, ANY)
TO_TOKENS = register_decoding(register(ToTokensOp()), Mixes("to_tokens makes tokens of an image's cells"))
READS.register(TO_TOKENS, ANY)
RESIZE = register_decoding(register(ResizeOp()), Mixes("resize interpolates between positions of an image"))
READS.register(RESIZE, FLOATS)
UPSAMPLE = register_decoding(register(UpsampleOp()), Mixes("upsample interpolates between positions of an image"))
READS.register(UPSAMPLE, FLOATS)
