"""unfold: an image's sliding blocks as columns (torch's F.unfold, im2col): [B, C, H, W] ->
[B, C*kh*kw, L], L the number of blocks (H' x W', the size a conv of that kernel, stride,
padding and dilation gives). VOLO's outlook attention reads each pixel's k x k neighbourhood
this way, and `fold` puts the blocks back (summing where they overlap):

    - {id: cols, from: v, unfold: {kernel: 3, padding: 1}}               # [B, 64, 14, 14] -> [B, 576, 196]
    - {id: image, from: weighted, fold: {size: 14, kernel: 3, padding: 1}}  # [B, 576, 196] -> [B, 64, 14, 14]

Columns are ordered as torch's: channel-major, then the kernel's rows and columns
(`rearrange: {pattern: "b (c k) l -> b c k l", sizes: {k: 9}}` splits them). The result is a
`tensor`; the input must be an image (to_image turns a token grid into one).
"""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import Sym, TensorType, tensor
from ..base import NonNegSize, Op, Params, PositiveSize, RuleError, no_cost, size_pair
from ..decoding import Mixes, register_decoding
from ..registry import register
from ..dtypes import READS, FLOATS


class BlockParams(Params):
    """The sliding blocks of F.unfold and F.fold (each an int, or [h, w])."""

    kernel: PositiveSize = Field(description="the block: an int, or [kh, kw]")
    stride: PositiveSize = Field(1, description="the step between blocks")
    padding: NonNegSize = Field(0, description="zeros added on each side of the image")
    dilation: PositiveSize = Field(1, description="the spacing of a block's elements")


def geometry(p) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kernel, stride, padding, dilation) per axis."""
    return size_pair(p.kernel), size_pair(p.stride), size_pair(p.padding), size_pair(p.dilation)


def blocks(p, size, what: str) -> tuple[int, int]:
    """The blocks per axis over an image of `size` (H, W); RuleError where none fits."""
    kernel, stride, padding, dilation = geometry(p)
    counts = []
    for n, k, s, pad, d in zip(size, kernel, stride, padding, dilation):
        span = d * (k - 1) + 1  # the block's extent
        if n + 2 * pad < span:
            raise RuleError(f"{what}: a block of {k} (dilation {d}: {span} pixels) is larger than the "
                            f"{size[0]}x{size[1]} image padded to {n + 2 * pad}", field="kernel",
                            hint=f"use a smaller kernel or dilation, or more padding")
        counts.append((n + 2 * pad - span) // s + 1)
    return counts[0], counts[1]


class UnfoldParams(BlockParams):
    pass


class UnfoldOp(Op):
    """[B, C, H, W] -> [B, C*kh*kw, H'*W']: each block a column (F.unfold)."""

    primitive = "unfold"
    Params = UnfoldParams
    cost = no_cost  # a copy: FlopCounterMode counts none

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "image":
            raise RuleError(f"unfold reads an image [B, C, H, W], got {x.layout_name()} {x.describe()}", field="from",
                            hint="to_image turns a token grid into an image; rearrange any other tensor into one")
        if any(isinstance(d, Sym) for d in x.shape[1:]):
            raise RuleError(f"unfold needs an image of fixed size, got {x.describe()}", field="from")
        kernel = geometry(p)[0]
        h, w = blocks(p, x.shape[2:], "unfold")
        return tensor((x.shape[0], x.channels * kernel[0] * kernel[1], h * w))  # [B, C*kh*kw, L]


UNFOLD = register(UnfoldOp())
READS.register(UNFOLD, FLOATS)
register_decoding(UNFOLD, Mixes("unfold reads the pixels of a block around each one"))
