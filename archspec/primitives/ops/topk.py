"""topk: the k largest (or smallest) values along one axis of each sample, or their indices
(torch.topk; an MoE router's chosen experts and their scores, DeepSeek's group-limited choice).

torch.topk gives both at once; here one node gives one of them (`output: values` or
`output: indices`), so a spec that needs both writes two nodes reading the same input:

    - {id: weights, from: scores, topk: {k: 2}}                    # [B, N, E] -> [B, N, 2]
    - {id: experts, from: scores, topk: {k: 2, output: indices}}   # [B, N, E] -> [B, N, 2] int64

Both are sorted (the largest first, or with `largest: false` the smallest), as torch.topk's
default; ties come in torch's order. Along the channels of tokens or a feature vector the
values keep the layout (k channels; tokens keep their grid); otherwise they are a `tensor`.
The indices are int64: ids [B, k] when the input is [B, N], else a `tensor`. k must not exceed
the axis, at its smallest size where that size is symbolic.
"""

from __future__ import annotations

from typing import Literal

from ...core.declared import Field
from ...core.types import Sym, TensorType, ids, tensor, with_channels
from ..base import MAX_SIZE, Cost, Op, Params, PositiveInt, RuleError
from ..decoding import TOKENWISE, Mixes, register_decoding
from ..registry import register
from ..index_ranges import VALUES, keeps
from ..dtypes import READS, ANY


class TopkParams(Params):
    k: PositiveInt = Field(description="how many values are kept along the axis")
    axis: int = Field(-1, ge=-MAX_SIZE, le=MAX_SIZE,
                      description="the axis, counted from the batch (0) or from the end (-1); never the batch")
    largest: bool = Field(True, description="the largest values (false: the smallest)")
    output: Literal["values", "indices"] = Field("values", description="the values kept, or their indices "
                                                                      "along the axis (int64)")


class TopkOp(Op):
    """torch.topk(x, k, dim=axis, largest, sorted=True): the values or the indices."""

    primitive = "topk"
    Params = TopkParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        axis = topk_axis(p.axis, x)
        size = x.shape[axis]
        smallest = size.lo if isinstance(size, Sym) else size
        if p.k > smallest:
            at = f" (at its smallest, {size} = {smallest})" if isinstance(size, Sym) else ""
            raise RuleError(f"topk of {p.k} along axis {p.axis} of {x.layout_name()} {x.describe()}: the axis has "
                            f"{smallest}{at}", field="k", hint=f"use a k of at most {smallest}")
        shape = x.shape[:axis] + (p.k,) + x.shape[axis + 1:]
        if p.output == "indices":
            return ids(p.k) if len(shape) == 2 else tensor(shape, "int64")
        if axis == len(x.shape) - 1 and x.layout in ("tokens", "vector"):
            return with_channels(x, p.k)  # [..., C] -> [..., k], the grid kept
        return tensor(shape, x.dtype)

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)  # a selection: no multiply-adds (FlopCounterMode counts none)


def topk_axis(axis: int, x: TensorType) -> int:
    """`axis` counted from 0; a RuleError for the batch or an axis outside x."""
    rank = len(x.shape)
    if rank < 2:
        raise RuleError(f"topk needs an axis besides the batch; {x.layout_name()} {x.describe()} has none",
                        field="from")
    if not -rank <= axis < rank:
        raise RuleError(f"axis {axis} is outside {x.layout_name()} {x.describe()}", field="axis",
                        hint=f"its axes are 1 to {rank - 1}, or -{rank - 1} to -1 from the end")
    if axis % rank == 0:
        raise RuleError(f"topk over axis {axis}, the batch: each sample must stay its own", field="axis",
                        hint=f"axes count from the batch (axis 0): the first axis of a sample is 1, the last -1 "
                             f"(here 1 to {rank - 1})")
    return axis % rank


def topk_decoding(p: TopkParams):
    """Tokenwise along the channels (the last axis); along any other axis it mixes the tokens."""
    return TOKENWISE if p.axis == -1 else Mixes("a topk along an axis other than the last mixes the tokens")


TOPK = register(TopkOp())
VALUES.register(TOPK, lambda p, inputs, bounds: inputs[0].shape[p.axis] if p.output == "indices" else
                keeps(p, inputs, bounds))  # indices: positions along the axis
READS.register(TOPK, ANY)
register_decoding(TOPK, topk_decoding)
