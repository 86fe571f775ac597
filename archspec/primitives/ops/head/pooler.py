"""pooler: one token through a linear layer and a tanh (BERT's pooler: the first token)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import Sym, TensorType, vector
from ...base import Cost, NonNegInt, Op, Params, RuleError, not_tokens_hint
from ...counting import linear_flops, linear_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from ...decoding import FEATURES, Mixes, register_decoding


class PoolerParams(Params):
    kind: Literal["pooler"]
    index: NonNegInt = Field(0, description="the token pooled (BERT: 0, the [CLS] token)")
    act: Literal["tanh", "none"] = "tanh"


class PoolerHead(Op):
    """act(fc(x[:, index])) -> [B, C] (BERT's pooler)."""

    primitive = "head"
    kind = "pooler"
    Params = PoolerParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "tokens":
            raise RuleError(f"a pooler reads tokens, got {x.layout_name()}", hint=not_tokens_hint(x))
        shortest = x.length.lo if isinstance(x.length, Sym) else x.length
        if p.index >= shortest:
            raise RuleError(f"token {p.index} is outside sequences of {shortest} tokens", field="index")
        return vector(x.channels)  # [B, N, C] -> [B, C]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        width = inputs[0].channels
        return Cost(linear_params(width, width), linear_flops(1, width, width))


POOLER = register(PoolerHead())
READS.register(POOLER, FLOAT_FIRST)
register_decoding(POOLER, Mixes("a pooler reads one token for the sequence"), FEATURES)
