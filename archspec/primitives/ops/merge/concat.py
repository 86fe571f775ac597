"""concat: Swin's patch merging. Each 2x2 neighbourhood concatenated (4C), a LayerNorm and a
linear reduction to `dim` (default 2C); norm before (Swin v1) or after (Swin v2) the reduction."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import SizeRemedy
from ....core.types import TensorType, grid_tokens
from ...base import Cost, Eps, Op, Params, PositiveInt, RuleError
from ...counting import linear_params, norm_params
from ...grids import as_image, origin_text
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from ...decoding import Mixes, register_decoding


class ConcatParams(Params):
    kind: Literal["concat"]
    dim: PositiveInt | None = Field(None, description="output width (default: twice the input)")
    norm: Literal["before", "after"] = Field("before", description="LayerNorm before (v1) or after (v2) the reduction")
    norm_eps: Eps = 1e-5
    bias: bool = False


def out_width(p: ConcatParams, width: int) -> int:
    return p.dim if p.dim is not None else 2 * width


class ConcatMerge(Op):
    """2x2 neighbourhoods concatenated, normed and reduced: grid / 2, width x 2 (Swin)."""

    primitive = "merge"
    kind = "concat"
    Params = ConcatParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        channels, (h, w), origin = as_image(x, "merge")
        if x.layout != "tokens":
            raise RuleError(f"concat merge reads a token grid, got {x.layout_name()}")
        if h % 2 or w % 2:
            raise RuleError(f"concat merge needs an even grid, got {h}x{w}{origin_text(x)}", field="kind",
                            hint=SizeRemedy("choose an input size whose grid stays even at every merge"), grid=origin)
        return grid_tokens((h // 2, w // 2), out_width(p, channels), origin=origin.then("merge", 2))  # [B, HW/4, dim]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        channels, width = inputs[0].channels, out.channels
        positions = out.grid[0] * out.grid[1]
        params = linear_params(4 * channels, width, p.bias)
        params += norm_params(4 * channels if p.norm == "before" else width)
        return Cost(params, 2 * positions * 4 * channels * width)


CONCAT = register(ConcatMerge())
READS.register(CONCAT, FLOAT_FIRST)
register_decoding(CONCAT, Mixes("merge joins neighbouring tokens"))
