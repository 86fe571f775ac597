"""argsort: the order that sorts each row of a [B, N] tensor (MAE's random masking sorts a noise
input: `ids_shuffle = argsort(noise)`, and inverts a permutation: `ids_restore = argsort(ids_shuffle)`)."""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import TensorType, ids
from ..base import Cost, Op, Params, RuleError
from ..registry import register
from ..index_ranges import VALUES, last_axis
from ..dtypes import READS, ANY
from ..decoding import Mixes, register_decoding


class ArgsortParams(Params):
    descending: bool = Field(False, description="largest first (default: smallest first)")


class ArgsortOp(Op):
    """torch.argsort(x, dim=-1): a float or int64 [B, N] -> ids [B, N] int64 (not stable).

    Like torch's default, ties may come in any order (MAE's noise is continuous)."""

    primitive = "argsort"
    Params = ArgsortParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if len(x.shape) != 2:
            raise RuleError(f"argsort sorts the rows of a [B, N] tensor, got {x.layout_name()} {x.describe()}",
                            hint="a float input [B, N] (e.g. noise: [B, 196]) or token ids [B, N]", field="from")
        return ids(x.shape[1])  # [B, N] -> [B, N] int64

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


ARGSORT = register(ArgsortOp())
VALUES.register(ARGSORT, last_axis)
READS.register(ARGSORT, ANY)
register_decoding(ARGSORT, Mixes("argsort orders values across an axis"))
