"""pool: average or max pooling over an image or a token grid (torch's avg_pool2d / max_pool2d),
giving the layout it read on the pooled grid; MaxViT's and CoAtNet's downsampling shortcut
(`pool: {fn: mean, kernel: 2}`), PoolFormer's token mixer. With `output` instead of a kernel,
adaptive pooling to that grid from any input size (torch's adaptive_avg_pool2d /
adaptive_max_pool2d): UperNet's and PSPNet's pyramid pooling (`pool: {fn: mean, output: 6}`).

    pool: {fn: mean, kernel: 3, stride: 2, padding: 1, count_include_pad: false}
    pool: {fn: mean, output: [1, 1]}
"""

from __future__ import annotations

from typing import Literal, Optional

from ...core.declared import Field
from ...core.suggestions import GridOrigin, Remedy
from ...core.types import TensorType
from ..base import NonNegSize, Op, Params, PositiveSize, RuleError, no_cost, size_pair
from ..decoding import Mixes, register_decoding
from ..grids import as_image
from ..registry import register
from ..dtypes import READS, FLOATS
from .layout import on_grid


class PoolParams(Params):
    fn: Literal["mean", "max"] = Field(description="mean: average pooling; max: max pooling")
    kernel: Optional[PositiveSize] = Field(None, description="the window: an int, or [kh, kw] (or `output`)")
    stride: Optional[PositiveSize] = Field(None, description="the step (default: the kernel)")
    padding: NonNegSize = Field(0, description="zeros (mean) or -inf (max) on each side, "
                                                                 "at most half the kernel")
    count_include_pad: bool = Field(True, description="mean: the padding counts in the average (torch's default)")
    output: Optional[PositiveSize] = Field(None, description="adaptive pooling to this grid, an int or [h, w], from "
                                                             "any input size (torch's adaptive_avg_pool2d / "
                                                             "adaptive_max_pool2d): instead of kernel, stride and "
                                                             "padding")


WINDOW_FIELDS = ("kernel", "stride", "padding", "count_include_pad")  # what `output` replaces


def check_choice(p) -> None:
    """RuleError unless the pool has a kernel or an output, not both (nor a window's other fields with output)."""
    if p.output is None and p.kernel is None:
        raise RuleError("pool needs a kernel (a window), or an output size (adaptive pooling)", field="kernel",
                        hint=Remedy("add `kernel: 2` for a 2x2 window, or `output: 1` to pool to one position"))
    if p.output is None:
        return
    given = [name for name in WINDOW_FIELDS if name in p.model_fields_set]
    if given:
        raise RuleError(f"`output` (adaptive pooling) takes no {given[0]}: its windows follow from the input and "
                        f"output sizes", field=given[0],
                        hint=Remedy(f"remove {' and '.join(given)}, or `output` for a fixed window"))


def window(p) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kernel, stride, padding) per axis; RuleError for a padding over half the kernel. Not for `output`."""
    kernel, padding = size_pair(p.kernel), size_pair(p.padding)
    stride = kernel if p.stride is None else size_pair(p.stride)
    for k, pad in zip(kernel, padding):
        if pad > k // 2:
            raise RuleError(f"padding {pad} is more than half the kernel {k}", field="padding",
                            hint=Remedy(f"use a padding of at most {k // 2}"))
    return kernel, stride, padding


def pooled(p, size: tuple[int, int]) -> tuple[int, int]:
    """The grid after pooling (sizes may be torch SymInts while exporting)."""
    if p.output is not None:
        return size_pair(p.output)  # (H, W) -> the output's, whatever the input
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
        check_choice(p)
        if p.output is not None:
            return on_grid(x, channels, pooled(p, size), GridOrigin())  # [B, C, h, w] or [B, h*w, C]
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
