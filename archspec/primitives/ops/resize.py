"""resize: an image brought to a given height and width by interpolation (nearest, bilinear or
bicubic), as torch's F.interpolate(x, size=...): CrossViT's second branch sees its 240x240 image
at 224x224, bicubic."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...core.types import TensorType, image
from ..base import Cost, Op, Params, PositiveSize, RuleError, size_pair
from ..registry import register


class ResizeParams(Params):
    size: PositiveSize = Field(description="the new height and width: an int (square), or [h, w]")
    mode: Literal["nearest", "bilinear", "bicubic"] = "bilinear"
    align_corners: bool = Field(False, description="bilinear, bicubic: align the corner pixels (torch's align_corners)")


class ResizeOp(Op):
    """[B, C, H, W] -> [B, C, h, w]."""

    primitive = "resize"
    Params = ResizeParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "image":
            raise RuleError(f"resize reads an image, got {x.layout_name()}",
                            hint="to_image turns tokens on a grid into an image")
        if p.align_corners and p.mode == "nearest":
            raise RuleError("align_corners goes with mode: bilinear or bicubic", field="align_corners")
        height, width = size_pair(p.size)
        return image(x.channels, height, width)  # [B, C, H, W] -> [B, C, h, w]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)  # FlopCounterMode counts no FLOPs for an interpolation


RESIZE = register(ResizeOp())
