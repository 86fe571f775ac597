"""constant: a fixed tensor (reads nothing, learns nothing). Like `param`, its shape is given
without the batch and it comes out with 1 there, so it broadcasts over the batch in add,
multiply, subtract and divide: `shape: [8]` is `[1, 8]`. It is a buffer of the module, not a
parameter (counted in the node's buffer bytes).

    constant: {shape: [8], value: 0.5}      every value 0.5
    constant: {shape: [8], fill: ones}      zeros (the default), ones, or
    constant: {shape: [4, 4], fill: eye}    ones on the diagonal of the last two axes
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...core.types import DTYPE_BYTES, TensorType, tensor
from ..base import Cost, MAX_SIZE, Op, Params, PositiveInt, RuleError
from ..registry import register


class ConstantParams(Params):
    shape: list[PositiveInt] = Field(min_length=1, max_length=6, description="the tensor's shape without the batch")
    fill: Literal["zeros", "ones", "eye"] | None = Field(
        None, description="zeros, ones, or eye (an identity on the last two axes); default zeros, or `value`")
    value: float | None = Field(None, allow_inf_nan=False, description="every value this number (instead of fill)")


class ConstantOp(Op):
    """A fixed tensor of the given shape (batch dimension 1, so it broadcasts), layout `tensor`."""

    primitive = "constant"
    Params = ConstantParams

    def reads(self, p) -> tuple[str, ...]:
        return ()

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        if p.fill is not None and p.value is not None:
            raise RuleError(f"a constant is filled with {p.fill} or with a value, not both", field="value",
                            hint="give `fill: zeros | ones | eye` or `value: NUMBER`")
        if p.fill == "eye" and len(p.shape) < 2:
            raise RuleError(f"an identity needs two axes, got shape {p.shape}", field="shape",
                            hint="give the last two sizes, e.g. shape: [4, 4]")
        count = 1
        for size in p.shape:
            count *= size
        if count > MAX_SIZE * 64:
            raise RuleError(f"a constant of {count:,} values is beyond archspec's limit", field="shape")
        return tensor((1, *p.shape))  # [1, ...]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0, buffer_bytes=out.max_numel() * DTYPE_BYTES[out.dtype])


CONSTANT = register(ConstantOp())
