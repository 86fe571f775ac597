"""to_image: tokens on a grid -> an image [B, C, H, W] (e.g. SegFormer's stage outputs)."""

from __future__ import annotations

from ...core.types import TensorType, image
from ..base import Cost, Op, Params, RuleError
from ..registry import register


class ToImageParams(Params):
    pass


class ToImageOp(Op):
    """[B, H*W, C] on an HxW grid -> [B, C, H, W]."""

    primitive = "to_image"
    Params = ToImageParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "tokens" or not x.grid:
            raise RuleError(f"to_image reads tokens on a grid, got {x.layout_name()}")
        if x.prefix:
            raise RuleError(f"to_image needs the grid tokens alone; these have {x.prefix} prefix token(s)",
                            hint=f"slice them off first: `slice: {{start: {x.prefix}}}`")
        return image(x.channels, x.grid[0], x.grid[1], origin=x.origin)  # [B, N, C] -> [B, C, H, W]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


TO_IMAGE = register(ToImageOp())
