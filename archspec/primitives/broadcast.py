"""Element-wise ops on two tensors: their shapes must broadcast (numpy's rules: aligned on the
right, each pair of sizes equal or one of them 1); an operand of fewer axes that holds the batch
would have its batch meet another axis, and is refused. A symbolic size broadcasts with itself and
with 1 only. The result keeps the layout (grid, prefix tokens) of the operand that has the
result's shape."""

from __future__ import annotations

from dataclasses import replace

from ..core.types import Sym, TensorType, batch_factor
from .base import RuleError


def _text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _grid(grid) -> str:
    return "x".join(str(side) for side in grid)


def _one(a, b):
    """The broadcast of two sizes, or None when they do not broadcast."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    return None


def broadcast(x: TensorType, y: TensorType, what: str) -> TensorType:
    if x.dtype != y.dtype:
        raise RuleError(f"{what} reads {x.dtype} and {y.dtype} tensors", field="from",
                        hint="give both one dtype: `cast: {dtype: float32}` on the int64 one (or int64 on the "
                             "float one, to truncate it)")
    if x.grid is not None and y.grid is not None and tuple(x.grid) != tuple(y.grid):
        raise RuleError(f"{what}: tokens on a {_grid(x.grid)} grid and tokens on a {_grid(y.grid)} grid", field="from",
                        hint="both sides must lie on the same grid (check the patch, stride or pool sizes that make "
                             "them); a vector meant for every token has no grid: a param, or the tokens reduced")
    rank = max(len(x.shape), len(y.shape))
    for t in (x, y):
        if len(t.shape) < rank and t.shape and batch_factor(t.shape[0]):
            raise RuleError(f"{what}: a {_text(t.shape)} tensor and a {_text((x if t is y else y).shape)} one: "
                            f"aligned on the right, its batch axis {t.shape[0]} would meet axis {rank - len(t.shape)} of "
                            f"the other, not its batch", field="from",
                            hint="give both the same number of axes (rearrange the smaller one, e.g. 'b c -> b c 1 "
                                 "1' for an image), so that batch meets batch")
    if {x.layout, y.layout} == {"vector", "image"}:  # aligned on the right, C would meet the image's width
        vec, img = (x, y) if x.layout == "vector" else (y, x)
        raise RuleError(f"{what}: a feature vector {_text(vec.shape)} and an image {_text(img.shape)}: aligned on "
                        f"the right, the vector's channels would meet the image's width, not its channels",
                        field="from", hint="a per-channel scale of an image is a `param` of shape [C, 1, 1] (timm's "
                                           "LayerScale2d), or the vector rearranged 'b c -> b c 1 1'")
    xs = (1,) * (rank - len(x.shape)) + tuple(x.shape)
    ys = (1,) * (rank - len(y.shape)) + tuple(y.shape)
    shape = []
    for axis, (a, b) in enumerate(zip(xs, ys)):
        size = _one(a, b)
        if size is None:
            why = "symbolic sizes that may differ" if isinstance(a, Sym) or isinstance(b, Sym) else f"{a} vs {b}"
            raise RuleError(f"{what}: shapes {_text(x.shape)} and {_text(y.shape)} do not broadcast "
                            f"(dimension {axis}: {why})", field="from",
                            hint="element-wise ops need equal sizes, or 1 where one side is shared")
        shape.append(size)
    shape = tuple(shape)
    if x.grid is None and y.grid is not None and x.layout == y.layout and tuple(y.shape) == shape:
        return y  # the grid kept whichever side holds it (the ResMLP trial's [branch, x] lost it)
    for t in (x, y):
        if tuple(t.shape) == shape:
            return t
    base = x if len(x.shape) >= len(y.shape) else y
    return replace(base, shape=shape, grid=None, prefix=0)
