"""pool: average or max pooling over an image or a token grid (torch's avg_pool2d / max_pool2d),
giving the layout it read on the pooled grid; MaxViT's and CoAtNet's downsampling shortcut
(`pool: {fn: mean, kernel: 2}`), PoolFormer's token mixer.

    pool: {fn: mean, kernel: 3, stride: 2, padding: 1, count_include_pad: false}
"""

from __future__ import annotations

from typing import Literal, Optional

from ...core.declared import Field
from ...core.suggestions import Remedy
from ...core.types import TensorType
from ..base import NonNegSize, Op, Params, PositiveSize, RuleError, no_cost, size_pair
from ..decoding import Mixes, register_decoding
from ..grids import as_image
from ..registry import register
from ..dtypes import READS, FLOATS
from .layout import on_grid


class PoolParams(Params):
    fn: Literal["mean", "max"] = Field(description="mean: average pooling; max: max pooling")
    kernel: PositiveSize = Field(description="the window: an int, or [kh, kw]")
    stride: Optional[PositiveSize] = Field(None, description="the step (default: the kernel)")
    padding: NonNegSize = Field(0, description="zeros (mean) or -inf (max) on each side, "
                                                                 "at most half the kernel")
    count_include_pad: bool = Field(True, description="mean: the padding counts in the average (torch's default)")


def window(p) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kernel, stride, padding) per axis; RuleError for a padding over half the kernel."""
    kernel, padding = size_pair(p.kernel), size_pair(p.padding)
    stride = kernel if p.stride is None else size_pair(p.stride)
    for k, pad in zip(kernel, padding):
        if pad > k // 2:
            raise RuleError(f"padding {pad} is more than half the kernel {k}", field="padding",
                            hint=Remedy(f"use a padding of at most {k // 2}"))
    return kernel, stride, padding


def pooled(p, size: tuple[int, int]) -> tuple[int, int]:
    """The grid after pooling (sizes may be torch SymInts while exporting)."""
    kernel, stride, padding = window(p)
    return tuple((n + 2 * pad - k) // s + 1 for n, k, s, pad in zip(size, kernel, stride, padding))  # (H, W) -> (H', W')


class PoolOp(Op):
    """[B, C, H, W] -> [B, C, H', W'], or a token grid [B, H*W, C] -> [B, H'*W', C]."""

    primitive = "pool"
    Params = PoolParams
    cost = no_cost  # FlopCounterMode counts no FLOPs for pooling

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        channels, size, origin = as_image(x, "pool")
        if p.fn == "max" and not p.count_include_pad:
            raise RuleError("count_include_pad goes with fn: mean", field="count_include_pad")
        kernel, _, padding = window(p)
        for n, k, pad in zip(size, kernel, padding):
            if n + 2 * pad < k:
                raise RuleError(f"kernel {k} is larger than the {size[0]}x{size[1]} input padded to {n + 2 * pad}",
                                field="kernel", grid=origin, hint=Remedy(f"use a kernel of at most {n + 2 * pad}"))
        grid = pooled(p, size)  # (H, W) -> (H', W')
        step = origin if grid == size else origin.then("pool", kernel[0], window(p)[1][0])
        return on_grid(x, channels, grid, step)  # [B, C, H', W'] or [B, H'W', C]


POOL = register(PoolOp())
READS.register(POOL, FLOATS)
register_decoding(POOL, Mixes("a pool reads the positions of a window of a grid"))
