"""upsample: an image scaled up by an integer factor (nearest or bilinear), e.g. the feature
maps of a segmentation decoder brought to one size."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...core.types import TensorType, image
from ..base import Cost, Op, Params, PositiveInt, RuleError
from ..registry import register


class UpsampleParams(Params):
    factor: PositiveInt = Field(description="the height and width are multiplied by this")
    mode: Literal["nearest", "bilinear"] = "nearest"
    align_corners: bool = Field(False, description="bilinear: align the corner pixels (torch's align_corners)")


class Upsample(Op):
    """[B, C, H, W] -> [B, C, H*f, W*f]."""

    primitive = "upsample"
    Params = UpsampleParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "image":
            raise RuleError(f"upsample reads an image, got {x.layout_name()}",
                            hint="to_image turns tokens on a grid into an image")
        if p.align_corners and p.mode == "nearest":
            raise RuleError("align_corners goes with mode: bilinear", field="align_corners")
        return image(x.channels, x.shape[2] * p.factor, x.shape[3] * p.factor)  # [B, C, H*f, W*f]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


UPSAMPLE = register(Upsample())
