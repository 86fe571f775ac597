"""reduce: the mean, sum, max, min or L2 norm over some axes of a sample (RMSNorm's mean square over the
channels, a mean pool over the tokens or over an image's height and width).

Axes count from the batch, as torch's `dim` does: on tokens `[B, N, C]` axis 1 (or -2) is the
tokens, 2 (or -1) the channels. The batch axis 0 is never reduced: each sample stays its own.

What comes out keeps its layout only where every axis still means what it meant:
- keepdim: true on tokens, an image or a vector keeps the layout, the reduced axes of size 1:
  the mean over the channels of a token grid is tokens `[B, N, 1]` on the same grid (it
  broadcasts back over the channels); over the tokens, one token `[B, 1, C]` without a grid;
  over an image's height and width, an image `[B, C, 1, 1]`;
- leaving exactly `[B, C]` of tokens or an image (a pool over the tokens, over height and width)
  is a feature vector `[B, C]`;
- anything else is the `tensor` layout of the remaining shape (channels reduced away from
  tokens leave `[B, N]`, which is neither tokens nor ids).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ...core.declared import Field
from ...core.types import TensorType, tensor, vector
from ..base import Cost, Op, Params, RuleError
from ..registry import register
from ..dtypes import READS, ANY
from ..decoding import TOKENWISE, Mixes, register_decoding

KEPT_LAYOUTS = ("tokens", "image", "vector")  # layouts whose axes stay meaningful at size 1
CHANNEL_AXIS = {"tokens": 2, "image": 1}  # what is left of them after a pool is a feature vector


class ReduceParams(Params):
    fn: Literal["mean", "sum", "max", "min", "norm"] = Field(
        description="what the reduced values become: their mean, sum, max, min, or norm (the L2 norm, "
                    "torch.linalg.vector_norm: its gradient at a zero vector is 0, where sqrt(sum(x^2)) written "
                    "out gives NaN)")
    axes: list[int] = Field([-1], min_length=1, max_length=8,
                            description="the axes reduced, counted from the batch (0) or from the end (-1)")
    keepdim: bool = Field(False, description="keep the reduced axes with size 1 (so the result broadcasts back)")
    layout: Literal["tensor", "image", "tokens"] | None = Field(
        None, alias="as", description="the output's layout, as rearrange's `as` (tokens: a rank-3 result [B, N, C], "
                                      "Nystromformer's segment-mean landmarks); default: the input's where it still "
                                      "fits, else tensor")


def sample_axis(axis: int, x: TensorType, what: str, field: str) -> int:
    """`axis` of x counted from 0, which must not be the batch (0): a RuleError otherwise."""
    rank = len(x.shape)
    if rank < 2:
        raise RuleError(f"{what} needs an axis besides the batch; {x.layout_name()} {x.describe()} has none",
                        field="from")
    if not -rank <= axis < rank:
        raise RuleError(f"axis {axis} is outside {x.layout_name()} {x.describe()}", field=field,
                        hint=f"its axes are 1 to {rank - 1}, or -{rank - 1} to -1 from the end")
    if axis % rank == 0:
        raise RuleError(f"{what} over axis {axis}, the batch: each sample must stay its own", field=field,
                        hint=f"axes count from the batch (axis 0): the first axis of a sample is 1, the last -1 "
                             f"(here 1 to {rank - 1})")
    return axis % rank


def as_layout(layout: str, out: TensorType) -> TensorType:
    """The reduced tensor read in `layout` (reduce's `as`): a rank-3 one as tokens (no grid), a
    rank-4 one as an image, any as a tensor."""
    wanted = {"image": 4, "tokens": 3}.get(layout)
    if wanted and len(out.shape) != wanted:
        raise RuleError(f"`as: {layout}` needs a rank-{wanted} result; this reduce gives {out.describe()}", field="as",
                        hint="use `as: tensor`, or reduce other axes")
    return TensorType(layout, out.shape, out.dtype)  # [B, ...] read as that layout


class ReduceOp(Op):
    """fn over the given axes of each sample; the layout is kept where it still fits, else `tensor`."""

    primitive = "reduce"
    Params = ReduceParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if p.fn in ("mean", "norm") and x.dtype != "float32":
            raise RuleError(f"a {p.fn} reads floating-point values, got {x.layout_name()} of {x.dtype}", field="fn",
                            hint="sum, max or min keep integers")
        axes = normalised_axes(p.axes, x)
        out = self.reduced(p, x, axes)
        return out if p.layout is None else as_layout(p.layout, out)

    def reduced(self, p, x: TensorType, axes) -> TensorType:
        if p.keepdim:
            return kept(x, axes)
        remaining = tuple(axis for axis in range(len(x.shape)) if axis not in axes)
        if remaining == (0, CHANNEL_AXIS.get(x.layout)):
            return vector(x.channels)  # [B, C]: pooled features
        return tensor(tuple(x.shape[axis] for axis in remaining), x.dtype)  # [B, remaining axes]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


def normalised_axes(axes: list[int], x: TensorType, what: str = "reduce") -> tuple[int, ...]:
    """The axes counted from 0, each once and none the batch (`what`: the op, for the messages)."""
    counted = tuple(sample_axis(axis, x, what, "axes") for axis in axes)
    for i, axis in enumerate(counted):
        if axis in counted[:i]:
            twice = " and ".join(str(a) for a, c in zip(axes, counted) if c == axis)
            raise RuleError(f"{what} names an axis twice: {axes} on {x.describe()}", field="axes",
                            hint=f"{twice} are one axis: name it once")
    return counted


def kept(x: TensorType, axes: tuple[int, ...]) -> TensorType:
    """The type of a reduction with keepdim: the reduced axes become 1."""
    shape = tuple(1 if axis in axes else d for axis, d in enumerate(x.shape))  # [B, ..., 1, ...]
    if x.layout not in KEPT_LAYOUTS:
        return tensor(shape, x.dtype)
    if x.layout == "tokens" and 1 in axes:
        return replace(x, shape=shape, grid=None, prefix=0, origin=None)  # one token, no grid
    if x.layout == "image" and (2 in axes or 3 in axes):
        return replace(x, shape=shape, origin=None)  # a 1-pixel image: no grid of the input's
    return replace(x, shape=shape)


def reduce_decoding(p: ReduceParams):
    """Tokenwise over the channels (the last axis) alone; over any other axis it mixes the tokens."""
    return TOKENWISE if list(p.axes) == [-1] else Mixes("a reduce over an axis other than the last mixes the tokens")


REDUCE = register(ReduceOp())
READS.register(REDUCE, ANY)
register_decoding(REDUCE, reduce_decoding)
