"""pad: an image (or a token grid read as one) padded with a constant (torch's F.pad): up to a
multiple of its height and width at the bottom and right, as timm pads an odd grid before a
stride-2 conv (DaViT's and Swin's downsampling, `F.pad(x, (0, pad_r, 0, pad_b))`), or by given
amounts on each side.

    pad: {to_multiple: 2}                    [B, C, 25, 25] -> [B, C, 26, 26]; 24 stays 24
    pad: {sides: [1, 2, 0, 3], value: 0}     top, bottom, left, right: [B, C, H + 3, W + 3]
"""

from __future__ import annotations

from typing import Optional

from ...core.declared import Field
from ...core.types import TensorType
from ..base import NonNegInt, Op, Params, PositiveSize, RuleError, no_cost, size_pair
from ..decoding import Mixes, register_decoding
from ..grids import as_image
from ..registry import register
from ..dtypes import READS, ANY
from .layout import on_grid


class PadParams(Params):
    to_multiple: Optional[PositiveSize] = Field(
        None, description="pad the bottom and the right up to a multiple of this: an int, or [h, w]")
    sides: Optional[list[NonNegInt]] = Field(None, min_length=4, max_length=4,
                                             description="or the amounts on each side: [top, bottom, left, right]")
    value: float = Field(0.0, allow_inf_nan=False, description="what the padding holds (0)")


def padded(p, size: tuple) -> tuple:
    """The grid after padding: (H, W) -> (H + top + bottom, W + left + right), or each side
    rounded up to its multiple (sizes may be torch SymInts while exporting)."""
    if p.sides is not None:
        top, bottom, left, right = p.sides
        return size[0] + top + bottom, size[1] + left + right
    return tuple((n + m - 1) // m * m for n, m in zip(size, size_pair(p.to_multiple)))  # (H, W) -> (H', W')


class PadOp(Op):
    """[B, C, H, W] -> [B, C, H', W'], or a token grid [B, H*W, C] -> [B, H'*W', C]."""

    primitive = "pad"
    Params = PadParams
    cost = no_cost  # FlopCounterMode counts no FLOPs for a pad

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if (p.to_multiple is None) == (p.sides is None):
            raise RuleError("pad takes `to_multiple` or `sides`, one of them", field="to_multiple",
                            hint="to_multiple: 2 pads the bottom and right up to even sides; sides: [top, bottom, "
                                 "left, right] pads by those amounts")
        channels, size, origin = as_image(x, "pad")
        grid = padded(p, size)  # (H, W) -> (H', W')
        step = origin if grid == size else origin.then("pad", grid[0] - size[0])
        return on_grid(x, channels, grid, step)  # [B, C, H', W'] or [B, H'W', C]


PAD = register(PadOp())
READS.register(PAD, ANY)
register_decoding(PAD, Mixes("a pad adds positions to a grid"))
