"""concat: join tensors along the tokens (sequence), the channels, or any other axis.

    concat: {}                      tokens after tokens: [B, N1 + N2, C] (16 + L where L is symbolic)
    concat: {along: channels}       [B, N, C1 + C2] (an image's axis 1)
    concat: {along: -1}             tensors of one rank joined along the last axis, every other size
                                    equal: three [1, N, N, 1] offsets -> [1, N, N, 3]

A numbered axis counts from the batch (0, which cannot be joined), as `slice`'s `along` does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Union

from ...core.declared import Field
from ...core.types import TensorType, ids, sequence_shaped, summed, tokens
from ..base import Cost, Op, Params, RuleError
from ..registry import register
from ..index_ranges import VALUES, largest
from ..dtypes import READS, ANY
from ..decoding import channels_only, register_decoding


class ConcatParams(Params):
    along: Union[Literal["tokens", "channels"], int] = Field(
        "tokens", description="join along the sequence, the channels, or an axis by number (1 is the one after "
                              "the batch, -1 the last)")


def one_batch(p, inputs: list[TensorType]) -> None:
    """RuleError where the inputs' batches differ (1 and B): torch.cat does not broadcast."""
    batches = [t.shape[0] if t.shape else None for t in inputs]
    if len(set(map(str, batches))) > 1:
        odd = next(i for i, b in enumerate(batches) if str(b) != str(batches[0]))
        raise RuleError(f"concat joins tensors of one batch; input 1 has a batch of {batches[0]}, input {odd + 1} "
                        f"of {batches[odd]}", field="from",
                        hint="a batch of 1 (a param or constant, or what is made from one) does not join a batch "
                             "of B: add or multiply broadcast, concat does not; `expand: {shape: [B, ...]}` gives it "
                             "every sample's rows, and `tokens` puts learned tokens in front of every sample's")


def concat_axis(p, x: TensorType) -> int:
    """The axis (counted from the batch) a numbered concat joins; RuleError for the batch or no axis."""
    rank = len(x.shape)
    if not -rank <= p.along < rank or p.along % rank == 0:
        raise RuleError(f"axis {p.along} is not an axis of {x.describe()} other than the batch", field="along",
                        hint=f"axes 1 to {rank - 1}, or -1 to -{rank - 1} from the end")
    return p.along % rank


class ConcatOp(Op):
    """Tensors joined along the tokens or the channels; the other sizes must agree."""

    primitive = "concat"
    Params = ConcatParams
    variadic = True

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "y")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        one_batch(p, inputs)
        if isinstance(p.along, int):
            return self.axis(p, inputs)
        first = inputs[0]
        for i, t in enumerate(inputs):
            if t.layout != "tokens" and not (p.along == "channels" and t.layout in ("image", "vector")):
                raise RuleError(f"concat along {p.along} reads tokens, got {t.layout_name()} (input {i + 1})",
                                field="from")
            if t.layout != first.layout or t.dtype != first.dtype:
                raise RuleError(f"concat reads tensors of one layout; input {i + 1} is {t.layout_name()}, "
                                f"input 1 {first.layout_name()}", field="from")
        if p.along == "channels":
            return self.channels(inputs)
        widths = {t.channels for t in inputs}
        if len(widths) > 1:
            raise RuleError(f"concat along tokens needs one width, got {sorted(widths)}", field="from",
                            hint="project the inputs to one width first (linear)")
        lengths = [t.length for t in inputs]
        total = summed(lengths)  # 17+L where a length is symbolic
        last = inputs[-1]
        if last.grid and all(not t.grid and isinstance(t.length, int) for t in inputs[:-1]):
            return tokens(total, first.channels, last.grid, last.prefix + sum(lengths[:-1]), last.origin)  # a prefix
        return tokens(total, first.channels)  # [B, sum(N), C]

    def channels(self, inputs: list[TensorType]) -> TensorType:
        first = inputs[0]

        def others(t: TensorType) -> tuple:  # every size but the channels
            return tuple(t.shape[2:]) if t.layout == "image" else tuple(t.shape[:-1])

        for i, t in enumerate(inputs):
            if others(t) != others(first):
                raise RuleError(f"concat along channels needs equal other sizes; input {i + 1} is "
                                f"{t.describe()}, input 1 {first.describe()}", field="from")
        width = sum(t.channels for t in inputs)
        if first.layout == "image":
            return replace(first, shape=(first.shape[0], width) + tuple(first.shape[2:]))  # [B, sum(C), H, W]
        return replace(first, shape=tuple(first.shape[:-1]) + (width,))  # [..., sum(C)]

    def axis(self, p, inputs: list[TensorType]) -> TensorType:
        """Tensors of one layout and rank joined along axis `along`; every other size equal."""
        if len(inputs[0].shape) == 2 and all(sequence_ids(t) for t in inputs) and concat_axis(p, inputs[0]) == 1:
            return ids(summed([t.shape[1] for t in inputs]))  # int64 [B, 16] and ids [B, L] -> ids [B, 16+L]: a mask
        first = inputs[0]
        axis = concat_axis(p, first)
        for i, t in enumerate(inputs):
            if t.layout != first.layout or t.dtype != first.dtype or len(t.shape) != len(first.shape):
                raise RuleError(f"concat along axis {p.along} reads tensors of one layout and rank; input {i + 1} is "
                                f"{t.layout_name()} {t.describe()}, input 1 {first.layout_name()} {first.describe()}",
                                field="from", hint=layout_hint(t, first))
            others = [(a, b) for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis and a != b]
            if others:
                raise RuleError(f"concat along axis {p.along} needs equal sizes on every other axis; input {i + 1} is "
                                f"{t.describe()}, input 1 {first.describe()}", field="from",
                                hint="rearrange or slice the inputs to one shape but the joined axis")
        sizes = [t.shape[axis] for t in inputs]
        shape = first.shape[:axis] + (summed(sizes),) + first.shape[axis + 1:]  # axis -> the sum of the sizes
        if first.layout == "tokens" and axis == 1:
            return replace(first, shape=shape, grid=None, prefix=0, origin=None)
        if first.layout == "image" and axis > 1:
            return replace(first, shape=shape, origin=None)  # another height or width
        return replace(first, shape=shape)

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


def sequence_ids(t: TensorType) -> bool:
    """Token ids [B, N], or an int64 [B, N] made in the graph (a mask of ones for image tokens):
    joined along the sequence they are ids, a padding mask (the GIT trial's took a rearrange)."""
    return t.layout == "ids" or sequence_shaped(t.shape, t.dtype)


CONCAT = register(ConcatOp())
VALUES.register(CONCAT, largest)
READS.register(CONCAT, ANY)
register_decoding(CONCAT, channels_only("a concat along the tokens"))


def layout_hint(t: TensorType, first: TensorType) -> str | None:
    """What to do when two inputs of one rank differ in layout: which input to give which layout."""
    if t.layout == first.layout or len(t.shape) != len(first.shape):
        return None
    target = {3: "tokens", 4: "image"}.get(len(first.shape), "tensor")
    if target not in (t.layout, first.layout):
        return None
    odd = t if first.layout == target else first
    return (f"a `rearrange` with `as: {target}` gives the {odd.layout} input ({odd.describe()}) the layout of "
            f"the other")
