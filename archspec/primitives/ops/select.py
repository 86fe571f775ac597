"""select: one token as a feature vector, e.g. the class token (`index: 0`)."""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import Sym, TensorType, vector
from ..base import Cost, MAX_SIZE, Op, Params, RuleError
from ..registry import register
from ..index_ranges import VALUES, keeps
from ..dtypes import READS, ANY
from ..decoding import Mixes, register_decoding


class SelectParams(Params):
    index: int = Field(0, ge=-MAX_SIZE, le=MAX_SIZE, description="the token taken; negative counts from the end")


class SelectOp(Op):
    """tokens[:, index] -> [B, C]."""

    primitive = "select"
    Params = SelectParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "tokens":
            raise RuleError(f"select reads tokens, got {x.layout_name()}")
        shortest = x.length.lo if isinstance(x.length, Sym) else x.length
        if not -shortest <= p.index < shortest:
            raise RuleError(f"token {p.index} is outside sequences of {shortest} tokens", field="index")
        return vector(x.channels)  # [B, N, C] -> [B, C]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


SELECT = register(SelectOp())
VALUES.register(SELECT, keeps)
READS.register(SELECT, ANY)
register_decoding(SELECT, Mixes("it takes one token for the sequence"))
