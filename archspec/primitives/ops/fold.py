"""fold: columns of sliding blocks put back into an image (torch's F.fold, col2im), summing
where blocks overlap: [B, C*kh*kw, L] -> [B, C, H, W], the inverse arrangement of `unfold`
with the same kernel, stride, padding and dilation; `size` is the image's (torch's
output_size). L must be the number of blocks that fit that image.

    - {id: image, from: cols, fold: {size: [14, 14], kernel: 3, padding: 1}}   # [B, 576, 196] -> [B, 64, 14, 14]
"""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import Sym, TensorType
from ..base import Op, PositiveSize, RuleError, no_cost, size_pair
from ..decoding import Mixes, register_decoding
from ..registry import register
from ..dtypes import READS, FLOATS
from .unfold import BlockParams, blocks, geometry


class FoldParams(BlockParams):
    size: PositiveSize = Field(description="the image's height and width: an int, or [h, w] (torch's output_size)")


class FoldOp(Op):
    """[B, C*kh*kw, L] -> [B, C, H, W]: each column added back at its block (F.fold)."""

    primitive = "fold"
    Params = FoldParams
    cost = no_cost  # sums of overlapping blocks: FlopCounterMode counts none

    def one_grid(self, p) -> str | None:
        return "a fold to a fixed image size"

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if len(x.shape) != 3:
            raise RuleError(f"fold reads columns [B, C*kh*kw, L], got {x.layout_name()} {x.describe()}", field="from",
                            hint="unfold gives them; rearrange to [B, C*kh*kw, L] first")
        if x.dtype != "float32":
            raise RuleError(f"fold reads floating-point values, got {x.layout_name()} of {x.dtype}", field="from")
        rows, count = x.shape[1], x.shape[2]
        if isinstance(rows, Sym) or isinstance(count, Sym):
            raise RuleError(f"fold needs fixed sizes, got {x.describe()}", field="from")
        size = size_pair(p.size)
        kernel = geometry(p)[0]
        per_block = kernel[0] * kernel[1]
        if rows % per_block:
            raise RuleError(f"fold: {rows} rows are not a multiple of the kernel's {kernel[0]}x{kernel[1]} = "
                            f"{per_block} (channels x block)", field="kernel")
        h, w = blocks(p, size, "fold")
        if count != h * w:
            raise RuleError(f"fold: {count} columns, but {h}x{w} = {h * w} blocks fit a {size[0]}x{size[1]} image "
                            f"with this kernel, stride, padding and dilation", field="size",
                            hint="give the size of the image the columns were unfolded from")
        return TensorType("image", (x.shape[0], rows // per_block, size[0], size[1]))  # [B, C, H, W]


FOLD = register(FoldOp())
READS.register(FOLD, FLOATS)
register_decoding(FOLD, Mixes("fold sums the blocks that overlap each pixel"))
