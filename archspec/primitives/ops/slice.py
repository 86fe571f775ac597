"""slice: a range of tokens (or channels), e.g. the grid tokens without the class token
(`start: 1`), which keeps the grid, or the class and distillation tokens (`stop: 2`); of a
`tensor` or an image, a range along any axis but the batch (`along: 3` of [B, h, N, d] cuts the
head dims; `along: channels` is an image's axis 1 and the last axis of anything else)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Union

from ...core.declared import Field
from ...core.types import Sym, TensorType, shifted, tokens
from ..base import MAX_SIZE, Cost, Op, Params, RuleError
from ..registry import register
from ..index_ranges import VALUES, keeps
from ..dtypes import READS, ANY
from ..decoding import channels_only, register_decoding


class SliceParams(Params):
    along: Union[Literal["tokens", "channels"], int] = Field(
        "tokens", description="tokens, channels, or an axis: counted from the batch (0) or from the end (-1), never "
                              "the batch")
    start: int = Field(0, ge=-MAX_SIZE, le=MAX_SIZE,
                       description="first index taken; negative counts from the end (-1: the last), as Python's")
    stop: int | None = Field(None, ge=-MAX_SIZE, le=MAX_SIZE,
                             description="index after the last one taken (default: the end); negative counts from the "
                                         "end (-1: all but the last), as Python's")


def bounds(p, size: int) -> tuple[int, int]:
    """(start, stop) of the slice over `size` indices, negative ones counted from the end."""
    start = p.start + size if p.start < 0 else p.start
    stop = size if p.stop is None else (p.stop + size if p.stop < 0 else p.stop)
    return start, stop


def symbolic_bounds(p, size: Sym) -> tuple[int, int]:
    """(start, stop) of the slice over a symbolic length, in indices of its shortest size: a stop
    every size reaches, or the last -start indices (start < 0, no stop)."""
    if p.start < 0 and p.stop is None:
        if -p.start > size.lo:
            raise RuleError(f"the last {-p.start} of a symbolic length ({size}, at least {size.lo}) are more than "
                            "its shortest size has", field="start")
        return size.lo + p.start, size.lo
    if p.stop is not None and p.stop < 0:
        raise RuleError(f"a negative stop over the symbolic length {size} would leave {size} - {-p.stop} tokens, a "
                        "length archspec cannot name", field="stop",
                        hint="give the input a fixed length, or cut a fixed count: `stop: N` from the start, or "
                             "`start: -N` alone for the last N")
    if p.start < 0 or p.stop is None or p.stop > size.lo:
        raise RuleError(f"slicing a symbolic length ({size}, at least {size.lo}) needs a `stop` it always reaches "
                        "(or a negative `start` alone: the last tokens)", field="stop")
    return p.start, p.stop


def cuts_a_count(p) -> bool:
    """Whether a slice drops a fixed count from a symbolic length, its length then symbolic: `start:
    k` alone (the text after k image tokens) or a negative stop (`stop: -1`, a conv's extra output)."""
    return p.start >= 0 and (p.stop is None and p.start > 0 or p.stop is not None and p.stop < 0)


def symbolic_cut(p, x: TensorType, size: Sym) -> TensorType:
    """Tokens [B, L, C] less `start` in front and -stop at the end: [B, L - start + stop, C]."""
    dropped = p.start - (p.stop or 0)
    if dropped >= size.lo:
        raise RuleError(f"slice {span(p)} drops {dropped} of a symbolic length ({size}, at least {size.lo}): its "
                        "shortest would be empty", field="start" if p.stop is None else "stop",
                        hint="declare its dim longer, or cut fewer")
    return tokens(shifted(size, -dropped), x.channels)  # [B, L - dropped, C]


def span(p) -> str:
    """The slice as written, start:stop (`1:`, `:-1`)."""
    return f"{p.start or ''}:{'' if p.stop is None else p.stop}"


def slice_axis(p, x: TensorType) -> int:
    """The axis (counted from the batch) a slice of x cuts: tokens 1, channels the channels' axis
    (1 of an image, the last otherwise), or the number given; RuleError for the batch or no axis."""
    rank = len(x.shape)
    if p.along == "tokens":
        if x.layout != "tokens":
            raise RuleError(f"{x.layout_name()} has no tokens axis ({x.describe()})", field="along",
                            hint=f"name the axis: along: 1 to {rank - 1}, or -1 for the last")
        return 1
    if p.along == "channels":
        return 1 if x.layout == "image" else rank - 1
    if not -rank <= p.along < rank or p.along % rank == 0:
        raise RuleError(f"axis {p.along} is not an axis of {x.describe()} other than the batch", field="along",
                        hint=f"axes 1 to {rank - 1}, or -1 to -{rank - 1} from the end")
    return p.along % rank


def axis_slice(p, x: TensorType) -> TensorType:
    """x[..., start:stop, ...] along one axis, the layout kept (an image stays an image; tokens cut
    along the tokens lose their grid)."""
    axis = slice_axis(p, x)
    size = x.shape[axis]
    if isinstance(size, Sym):
        raise RuleError(f"axis {axis} of {x.describe()} has a symbolic size ({size})", field="along")
    start, stop = bounds(p, size)
    if not 0 <= start < stop <= size:
        raise RuleError(f"slice {span(p)} is outside or empty for axis {axis} of {x.describe()}",
                        field="start", hint=f"start runs from 0 to {size - 1}, stop to {size} (or -{size} to -1 from the end)")
    if stop - start == size:
        return x
    shape = x.shape[:axis] + (stop - start,) + x.shape[axis + 1:]  # axis -> stop - start
    if x.layout == "tokens" and axis == 1:
        return replace(x, shape=shape, grid=None, prefix=0, origin=None)
    if x.layout == "image" and axis > 1:
        return replace(x, shape=shape, origin=None)  # another height or width
    return replace(x, shape=shape)


class SliceOp(Op):
    """tokens[start:stop] (or channels[start:stop], or along an axis); a slice that is exactly
    the grid keeps it."""

    primitive = "slice"
    Params = SliceParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout in ("tensor", "image"):
            return axis_slice(p, x)
        if isinstance(p.along, int):  # tokens' axis 1 or channels, as if named: the grid rules hold
            named = {1: "tokens", len(x.shape) - 1: "channels"}.get(slice_axis(p, x), "tokens")
            p = p.model_copy(update={"along": named})
        if x.layout != "tokens" and not (p.along == "channels" and x.layout == "vector"):
            raise RuleError(f"slice reads tokens, got {x.layout_name()}",
                            hint="a feature vector slices along: channels; a tensor or an image along an axis "
                                 "(along: 2)")
        size = x.channels if p.along == "channels" else x.length
        if isinstance(size, Sym) and cuts_a_count(p):
            return symbolic_cut(p, x, size)  # [B, L - start + stop, C]
        if isinstance(size, Sym):
            start, stop = symbolic_bounds(p, size)
            size = size.lo
        else:
            start, stop = bounds(p, size)
        if not 0 <= start < stop <= size:
            raise RuleError(f"slice {span(p)} is outside or empty for {size} {p.along}", field="start",
                            hint=f"start runs from 0 to {size - 1}, stop to {size} (or -{size} to -1 from the end)")
        if p.along == "channels":
            return replace(x, shape=tuple(x.shape[:-1]) + (stop - start,))  # [..., stop - start]
        if x.grid and start == x.prefix and stop == size:
            return replace(x, shape=(x.shape[0], stop - start, x.channels), prefix=0)  # the grid tokens
        if x.grid and start == 0 and stop == size:
            return x
        out = tokens(stop - start, x.channels)  # [B, stop - start, C]
        return replace(out, shape=(x.shape[0],) + out.shape[1:])  # a param's batch of 1 stays 1

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


SLICE = register(SliceOp())
VALUES.register(SLICE, keeps)
READS.register(SLICE, ANY)
register_decoding(SLICE, channels_only("a slice along the tokens"))
