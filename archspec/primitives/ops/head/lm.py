"""lm: a linear map of every token to vocabulary logits, optionally tied to an embed table."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, dim_value, tokens
from ...base import Cost, Op, Params, PositiveInt, RuleError, not_tokens_hint
from ...counting import linear_flops, linear_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from ..embed import tied_table
from ...decoding import LOGITS, TOKENWISE, register_decoding


class LmParams(Params):
    kind: Literal["lm"]
    vocab: PositiveInt | None = Field(None, description="vocabulary size (taken from `tie` when tied)")
    tie: str | None = Field(None, description="use this embed node's table as the output weights")
    bias: bool = False
    logits_divisor: float = Field(1.0, gt=0, allow_inf_nan=False,
                                  description="the logits divided by this fixed number (Granite's logits_scaling)")
    logits_softcap: float | None = Field(None, gt=0, allow_inf_nan=False,
                                         description="the logits capped to (-cap, cap) as cap * tanh(logits / cap), "
                                                     "after the divisor (Gemma 2's final_logit_softcapping: 30); "
                                                     "none: no cap")


def lm_vocab(p: LmParams, width: int, ctx) -> int:
    if p.tie is None:
        if p.vocab is None:
            raise RuleError("an lm head needs `vocab` (or `tie` to an embed table)")
        return p.vocab
    vocab, dim = tied_table(p.tie, ctx)
    if dim != width:
        raise RuleError(f"the tied table ({p.tie}) is {dim} wide but the tokens are {width}", field="tie")
    if p.vocab is not None and p.vocab != vocab:
        raise RuleError(f"vocab {p.vocab} differs from the tied table's {vocab}", field="vocab")
    return vocab


class LmHead(Op):
    """Logits over the vocabulary for every token; the weight may be an embed's table (`tie`)."""

    primitive = "head"
    kind = "lm"
    Params = LmParams
    refs = ("tie",)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "tokens":
            raise RuleError(f"an lm head reads tokens, got {x.layout_name()}", hint=not_tokens_hint(x))
        return tokens(x.length, lm_vocab(p, x.channels, ctx))  # [B, L, C] -> [B, L, vocab]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        width, vocab = x.channels, out.channels
        params = 0 if p.tie else linear_params(width, vocab, p.bias)
        params += vocab if (p.tie and p.bias) else 0
        return Cost(params, linear_flops(dim_value(x.length), width, vocab))


LM = register(LmHead())
READS.register(LM, FLOAT_FIRST)
register_decoding(LM, TOKENWISE, LOGITS)
