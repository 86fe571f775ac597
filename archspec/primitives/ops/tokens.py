"""tokens: learned tokens put in front of the sequence (class, distillation or register
tokens). They join the prefix: a grid after them is kept."""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import TensorType, summed, tokens
from ..base import Cost, NonNegInt, Op, Params, PositiveInt, RuleError
from ..registry import register
from ..dtypes import READS, FLOAT_FIRST
from ..decoding import Mixes, register_decoding


class TokensParams(Params):
    count: PositiveInt = Field(1, description="how many learned tokens")
    at: NonNegInt = Field(0, description="where they go among the prefix tokens (0: first)")


class Tokens(Op):
    """`count` learned tokens inserted at position `at` of the prefix: [B, N, C] -> [B, N + count, C]."""

    primitive = "tokens"
    Params = TokensParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "tokens":
            raise RuleError(f"tokens are added to tokens, got {x.layout_name()}",
                            hint="patchify the image first" if x.layout == "image" else None)
        if p.at > x.prefix:
            raise RuleError(f"at {p.at} lies past the {x.prefix} prefix tokens", field="at",
                            hint="learned tokens go among the prefix tokens, before the sequence")
        return tokens(summed([p.count, x.length]), x.channels, x.grid, x.prefix + p.count, x.origin)  # [B, count + N, C]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(p.count * out.channels, 0)


TOKENS = register(Tokens())
READS.register(TOKENS, FLOAT_FIRST)
register_decoding(TOKENS, Mixes("it puts tokens before the sequence"))
