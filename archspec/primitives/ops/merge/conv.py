"""conv: a strided, overlapping convolution and a LayerNorm (PVT v2's OverlapPatchEmbed 3/2/1)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, grid_tokens
from ...base import Cost, Eps, NonNegInt, Op, Params, PositiveInt, RuleError
from ...counting import norm_params
from ...grids import as_image, conv_grid
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from ..patchify import check_conv_geometry
from ...decoding import Mixes, register_decoding


class ConvParams(Params):
    kind: Literal["conv"]
    dim: PositiveInt = Field(description="output width")
    kernel: PositiveInt = 3
    stride: PositiveInt = 2
    padding: NonNegInt = 1
    norm_eps: Eps = 1e-5


class ConvMerge(Op):
    """A strided, overlapping convolution and a LayerNorm (PVT v2 between stages)."""

    primitive = "merge"
    kind = "conv"
    Params = ConvParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        _, (h, w), origin = as_image(x, "merge")
        check_conv_geometry(p.kernel, p.stride, p.padding)
        grid = conv_grid((h, w), p.kernel, p.stride, p.padding)
        if min(grid) < 1:
            raise RuleError(f"kernel {p.kernel} is larger than the {h}x{w} grid", field="kernel", grid=origin)
        return grid_tokens(grid, p.dim, origin=origin.then("conv", p.kernel, p.stride))  # [B, H'W', dim]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        channels = inputs[0].channels
        positions = out.grid[0] * out.grid[1]
        fan_in = channels * p.kernel * p.kernel
        params = fan_in * p.dim + p.dim + norm_params(p.dim)
        return Cost(params, 2 * fan_in * p.dim * positions)


CONV = register(ConvMerge())
READS.register(CONV, FLOAT_FIRST)
register_decoding(CONV, Mixes("merge joins neighbouring tokens"))
