"""reconstruct: SimMIM's decoder. Features on a grid, a 1x1 convolution to stride*stride*channels,
and a pixel shuffle back to an image of the input's size."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, image
from ...base import Cost, Op, Params, PositiveInt, RuleError
from ...counting import linear_flops, linear_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from ...decoding import Mixes, register_decoding


class ReconstructParams(Params):
    kind: Literal["reconstruct"]
    stride: PositiveInt = Field(description="pixels per feature (SimMIM: the encoder's total stride, 32)")
    channels: PositiveInt = Field(3, description="channels of the reconstructed image")


class ReconstructHead(Op):
    """conv1x1(C -> stride^2 * channels) then PixelShuffle(stride): [B, C, h, w] -> [B, channels, h*s, w*s]."""

    primitive = "head"
    kind = "reconstruct"
    Params = ReconstructParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout == "tokens" and x.grid and not x.prefix:
            h, w = x.grid
        elif x.layout == "image":
            h, w = x.shape[2], x.shape[3]
        else:
            raise RuleError(f"reconstruct reads features on a grid (an image, or tokens on a grid without prefix "
                            f"tokens), got {x.describe() if x.layout == 'tokens' else x.layout_name()}")
        return image(p.channels, h * p.stride, w * p.stride)  # [B, C, h, w] -> [B, channels, h*s, w*s]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        out_channels = p.stride * p.stride * p.channels
        positions = x.row_numel() // x.channels
        return Cost(linear_params(x.channels, out_channels), linear_flops(positions, x.channels, out_channels))


RECONSTRUCT = register(ReconstructHead())
READS.register(RECONSTRUCT, FLOAT_FIRST)
register_decoding(RECONSTRUCT, Mixes("a reconstruction head reads the masked tokens"))
