"""to_tokens: an image [B, C, H, W] -> tokens [B, H*W, C] on the HxW grid."""

from __future__ import annotations

from ...core.types import TensorType, grid_tokens
from ..base import Cost, Op, Params, RuleError
from ..grids import image_origin
from ..registry import register


class ToTokensParams(Params):
    pass


class ToTokensOp(Op):
    """[B, C, H, W] -> [B, H*W, C] on an HxW grid."""

    primitive = "to_tokens"
    Params = ToTokensParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "image":
            raise RuleError(f"to_tokens reads an image, got {x.layout_name()}")
        h, w = x.shape[2], x.shape[3]
        return grid_tokens((h, w), x.channels, origin=image_origin(x))

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


TO_TOKENS = register(ToTokensOp())
