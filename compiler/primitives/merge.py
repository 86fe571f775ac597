"""merge: downsample a token grid.

concat  Swin's patch merging: each 2x2 neighbourhood concatenated (4C), a LayerNorm and a
        linear reduction to `dim` (default 2C). norm: before (Swin v1) or after (Swin v2).
conv    a strided, overlapping convolution and a LayerNorm (PVT v2's OverlapPatchEmbed 3/2/1).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from ..registry import (Cost, Eps, NonNegInt, Params, PositiveInt, Primitive, RuleError, linear_params, norm_params,
                        one_input, register, trace_text)
from ..types import TensorType, grid_tokens
from .patchify import as_image, conv_grid


class ConcatMerge(Params):
    kind: Literal["concat"]
    dim: PositiveInt | None = Field(None, description="output width (default: twice the input)")
    norm: Literal["before", "after"] = Field("before", description="LayerNorm before (v1) or after (v2) the reduction")
    norm_eps: Eps = 1e-5
    bias: bool = False


class ConvMerge(Params):
    kind: Literal["conv"]
    dim: PositiveInt = Field(description="output width")
    kernel: PositiveInt = 3
    stride: PositiveInt = 2
    padding: NonNegInt = 1
    norm_eps: Eps = 1e-5


MergeParams = Annotated[Union[ConcatMerge, ConvMerge], Field(discriminator="kind")]


def out_width(p, width: int) -> int:
    return p.dim if p.dim is not None else 2 * width


def infer(p, inputs: list[TensorType], ctx) -> TensorType:
    (x,) = inputs
    channels, (h, w), trace = as_image(x, "merge")
    if p.kind == "concat":
        if x.layout != "tokens":
            raise RuleError(f"concat merge reads a token grid, got {x.layout_name()}")
        if h % 2 or w % 2:
            raise RuleError(f"concat merge needs an even grid, got {h}x{w}{trace_text(x)}", field="kind",
                            hint="choose an input size whose grid stays even at every merge")
        return grid_tokens((h // 2, w // 2), out_width(p, channels), trace=trace + ("merge 2",))  # [B, HW/4, dim]
    grid = conv_grid((h, w), p.kernel, p.stride, p.padding)
    if min(grid) < 1:
        raise RuleError(f"kernel {p.kernel} is larger than the {h}x{w} grid", field="kernel")
    return grid_tokens(grid, p.dim, trace=trace + (f"conv {p.kernel}/{p.stride}",))  # [B, H'W', dim]


def cost(p, inputs: list[TensorType], out: TensorType) -> Cost:
    channels = inputs[0].channels
    positions = out.grid[0] * out.grid[1]
    if p.kind == "concat":
        width = out.channels
        params = linear_params(4 * channels, width, p.bias)
        params += norm_params(4 * channels if p.norm == "before" else width)
        return Cost(params, 2 * positions * 4 * channels * width)
    fan_in = channels * p.kernel * p.kernel
    params = fan_in * p.dim + p.dim + norm_params(p.dim)
    return Cost(params, 2 * fan_in * p.dim * positions)


PRIMITIVE = register(Primitive("merge", MergeParams, infer, cost, one_input, doc=__doc__))
