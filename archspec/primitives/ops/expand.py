"""expand: a tensor broadcast to a larger shape without copying (torch's Tensor.expand), where
the new sizes may be symbolic: a batch-1 param made a batch, so that it can be concatenated
to one (concat does not broadcast; add and multiply do).

    - {id: cls, param: {shape: [1, 64]}}                          # [1, 1, 64]
    - {id: cls_b, from: [cls, x], expand: {shape: [B, 1, 64]}}    # [B, 1, 64], B taken from x
    - {id: both, from: [cls_b, x], concat: {}}                    # [B, 1 + L, 64]
    - {id: row, from: [bias, x], expand: {shape: [B, L, -1]}}      # [1, 1, 64] -> [B, L, 64]
    - {id: as_x, from: [bias, x], expand: {}}                     # x's shape (torch's expand_as)

`shape` names every axis, the batch first: a number, -1 (the input's own size), `B` (the
batch) or a dim declared under `dims` (`L`). Only an axis of size 1 grows; the rank stays (add
axes of 1 with rearrange first). A shape with a symbolic size (`B`, `L`) reads a second input,
`like`, that has an axis of that size: the sizes are taken from it at run time, so the model
runs, and exports, at every batch and length. Without `shape` the result has `like`'s shape.
The result keeps the input's layout (a token grid where the tokens axis is unchanged).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Union

from ...core.declared import Field
from ...core.types import BATCH, Sym, TensorType
from ..base import Cost, MAX_SIZE, Op, Params, RuleError
from ..decoding import TOKENWISE, register_decoding
from ..registry import register
from ..index_ranges import VALUES, keeps
from ..dtypes import READS, ANY

Size = Union[int, str]


class ExpandParams(Params):
    shape: list[Size] | None = Field(None, min_length=1, max_length=6,
                                     description="the result's sizes, the batch first: numbers, -1 (the input's "
                                                 "own size), B or a dim declared under `dims` (taken from `like`); "
                                                 "default: `like`'s shape")


def _text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def symbolic(p) -> bool:
    """Whether the target names a symbolic size (or is `like`'s shape): the node reads `like`."""
    return p.shape is None or any(isinstance(size, str) for size in p.shape)


def resolve(size, dims: dict) -> int | Sym:
    """A size of `shape` as the checker sees it: a number, -1, or a dim (RuleError for a name
    that is none)."""
    if isinstance(size, int):
        if size == 0 or size < -1 or size > MAX_SIZE:
            raise RuleError(f"expand's sizes are positive numbers, -1, B or a dim; got {size}", field="shape",
                            hint="-1 keeps the input's size there")
        return size
    name = size.strip()
    if name.startswith("${") and name.endswith("}"):
        name = name[2:-1].strip()
    if name not in dims:
        declared = ", ".join(n for n in dims if n != BATCH.name)
        raise RuleError(f"unknown size '{size}' in expand's shape", field="shape",
                        hint="sizes are numbers, -1, B or a dim declared under `dims`"
                             + (f" (here: {declared})" if declared else " (this spec declares none)"))
    return dims[name]


def target(p, x: TensorType, like: TensorType | None, dims: dict) -> tuple:
    """The result's shape, each size checked against x's (only 1 grows) and, where symbolic,
    found in like."""
    if p.shape is None:
        wanted = tuple(like.shape)
        if len(wanted) != len(x.shape):
            raise RuleError(f"expand keeps the rank: {x.describe()} has {len(x.shape)} axes, `like` "
                            f"{like.describe()} {len(wanted)}", field="from",
                            hint="rearrange first to give the input axes of 1 where it grows")
    else:
        wanted = tuple(resolve(size, dims) for size in p.shape)
        if len(wanted) != len(x.shape):
            raise RuleError(f"expand keeps the rank: {x.describe()} has {len(x.shape)} axes, shape "
                            f"{_text(p.shape)} {len(wanted)}", field="shape",
                            hint="name every axis, the batch first (-1 keeps a size); add axes of 1 with "
                                 "rearrange first")
    shape = []
    for axis, (have, want) in enumerate(zip(x.shape, wanted)):
        if want == -1 or want == have:
            shape.append(have)
            continue
        if axis == 0 and not (want is BATCH or want == 1):
            raise RuleError(f"axis 0 of expand's shape is the batch: B, 1 or -1, got {want}", field="shape",
                            hint="B makes a batch-1 tensor one of the batch of `like`")
        if have != 1:
            raise RuleError(f"expand: axis {axis} of {x.describe()} has size {have} and cannot become {want} (only a "
                            f"size of 1 grows)", field="from" if p.shape is None else "shape",
                            hint=f"give {have} or -1 there")
        shape.append(want)
    for axis, size in enumerate(shape):
        if isinstance(size, Sym) and size not in tuple(x.shape) and (like is None or size not in tuple(like.shape)):
            held = "" if like is None else f"; `like` {like.describe()} has none"
            raise RuleError(f"expand to {_text(shape)}: the size {size} (axis {axis}) is taken from a second "
                            f"input that has an axis of that size{held}", field="from",
                            hint=f"read one that holds {size}: `from: [x, a node or input of size {size}]`")
    return tuple(shape)


def sources(p, x: TensorType, like: TensorType | None, dims: dict) -> tuple:
    """Per axis of the result, where its size comes from at run time: -1 (x's own), a number,
    or ("like", axis)."""
    out = []
    for axis, size in enumerate(target(p, x, like, dims)):
        if size == x.shape[axis]:
            out.append(-1)
        elif isinstance(size, Sym):
            out.append(("like", tuple(like.shape).index(size)))
        else:
            out.append(size)
    return tuple(out)


class ExpandOp(Op):
    """x broadcast to `shape` (or to `like`'s shape): axes of size 1 grow, nothing is copied."""

    primitive = "expand"
    Params = ExpandParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "like") if symbolic(p) else ("x",)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        like = inputs[1] if len(inputs) > 1 else None
        if not x.shape:
            raise RuleError(f"expand reads a tensor with a batch axis, got {x.layout_name()}", field="from")
        shape = target(p, x, like, ctx.graph.dims)
        if shape == tuple(x.shape):
            return x
        if like is not None and shape == tuple(like.shape) and like.layout == x.layout:
            return replace(like, dtype=x.dtype)  # like's layout: its grid and prefix tokens
        if x.layout == "tokens" and shape[1] != x.shape[1]:
            return replace(x, shape=shape, grid=None, prefix=0, origin=None)
        return replace(x, shape=shape, origin=None)

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)  # a view: nothing computed, nothing copied


EXPAND = register(ExpandOp())
VALUES.register(EXPAND, keeps)
READS.register(EXPAND, ANY)
register_decoding(EXPAND, TOKENWISE)  # each token is the input's one token (or its own): no token reads another
