"""constant: a fixed tensor (reads nothing, learns nothing). Like `param`, its shape is given
without the batch and it comes out with 1 there, so it broadcasts over the batch in add,
multiply, subtract and divide: `shape: [8]` is `[1, 8]`. It is a buffer of the module, not a
parameter (counted in the node's buffer bytes).

    constant: {shape: [8], value: 0.5}      every value 0.5
    constant: {shape: [8], fill: ones}      zeros (the default), ones, or
    constant: {shape: [4, 4], fill: eye}    ones on the diagonal of the last two axes
    constant: {shape: [14, 14], fill: index, along: 2}   each value its index along axis 2 (0..13):
                                            the column of a 14x14 grid (along: 1 the row)

`fill: index` (XLA's iota) is the generator of coordinate tensors: grid positions, offsets
between positions (two of them subtracted: ConViT's relative indices), frequencies (with
`power`), each made from it with the element-wise ops. Axes count from the batch (0), as
`slice`'s do, so the first axis of `shape` is 1; negative ones count from the end.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...core.types import DTYPE_BYTES, TensorType, tensor
from ..base import Cost, MAX_SIZE, Op, Params, PositiveInt, RuleError
from ..registry import register
from ..decoding import NO_TOKENS, register_decoding


class ConstantParams(Params):
    shape: list[PositiveInt] = Field(min_length=1, max_length=6, description="the tensor's shape without the batch")
    fill: Literal["zeros", "ones", "eye", "index"] | None = Field(
        None, description="zeros, ones, eye (an identity on the last two axes), or index (each value its index "
                          "along `along`); default zeros, or `value`")
    value: float | None = Field(None, allow_inf_nan=False, description="every value this number (instead of fill)")
    along: int | None = Field(None, description="fill: index: the axis whose index is the value (1 is the first "
                                                "axis of shape, -1 the last; the default)")


def index_axis(p) -> int:
    """The axis of the constant (the batch is 0) whose index `fill: index` writes; RuleError for
    the batch or an axis the constant does not have."""
    rank = len(p.shape) + 1
    along = -1 if p.along is None else p.along
    if not -rank <= along < rank or along % rank == 0:
        raise RuleError(f"axis {along} is not an axis of the constant [1, {', '.join(map(str, p.shape))}] other "
                        f"than the batch", field="along",
                        hint=f"axes 1 to {rank - 1} (1 is the first of shape), or -1 to -{rank - 1} from the end")
    return along % rank


class ConstantOp(Op):
    """A fixed tensor of the given shape (batch dimension 1, so it broadcasts), layout `tensor`."""

    primitive = "constant"

    def one_grid(self, p) -> str | None:
        return "a constant"
    Params = ConstantParams

    def reads(self, p) -> tuple[str, ...]:
        return ()

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        if p.fill is not None and p.value is not None:
            raise RuleError(f"a constant is filled with {p.fill} or with a value, not both", field="value",
                            hint="give `fill: zeros | ones | eye | index` or `value: NUMBER`")
        if p.fill == "eye" and len(p.shape) < 2:
            raise RuleError(f"an identity needs two axes, got shape {p.shape}", field="shape",
                            hint="give the last two sizes, e.g. shape: [4, 4]")
        if p.along is not None and p.fill != "index":
            raise RuleError("`along` names the axis of `fill: index`", field="along",
                            hint="add fill: index, or leave along out")
        if p.fill == "index":
            index_axis(p)
        count = 1
        for size in p.shape:
            count *= size
        if count > MAX_SIZE * 64:
            raise RuleError(f"a constant of {count:,} values is beyond archspec's limit", field="shape")
        return tensor((1, *p.shape))  # [1, ...]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0, buffer_bytes=out.max_numel() * DTYPE_BYTES[out.dtype])


CONSTANT = register(ConstantOp())
register_decoding(CONSTANT, NO_TOKENS)
