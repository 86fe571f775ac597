"""compare: x compared with a constant, element-wise, as 0/1 (MAE's mask of removed tokens is
`ids_restore >= len_keep` as float32)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...core.types import BATCH, TensorType, ids, tensor
from ..base import Cost, Op, Params
from ..registry import register


class CompareParams(Params):
    op: Literal["lt", "le", "gt", "ge", "eq", "ne"] = Field(description="x < value, <=, >, >=, == or !=")
    value: int | float = Field(description="the constant x is compared with")
    dtype: Literal["float32", "int64"] = Field("float32", description="the 0/1 result's dtype (int64 [B, N]: a "
                                                                      "sequence mask, as mask_token reads)")


class CompareOp(Op):
    """(x <op> value) as 0/1 of `dtype`, the shape of x (int64 [B, N]: ids, a sequence mask).

    Anything else is a tensor of x's shape."""

    primitive = "compare"
    Params = CompareParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if p.dtype == "int64" and len(x.shape) == 2 and x.shape[0] is BATCH:
            return ids(x.shape[1])  # [B, N] int64
        return tensor(x.shape, p.dtype)  # same shape, 0/1

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


COMPARE = register(CompareOp())
