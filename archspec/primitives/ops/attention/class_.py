"""class: class attention (CaiT, Touvron et al. 2021). The class tokens (the prefix of the stream)
ask, every token answers: queries from the class tokens only, keys and values from all tokens.
The output is the class tokens alone, [B, prefix, C]; the patches go on unchanged, and the spec
puts the new class tokens back in front of them (`concat`) where the model does. With the
residual on, the residual adds the input's class tokens: x_cls + ls(attn(norm(x))), timm's
LayerScaleBlockClassAttn."""

from __future__ import annotations

from typing import Literal

from ....core.suggestions import Remedy
from ....core.types import TensorType, dim_value, tokens
from ...base import Cost, RuleError, sublayer_params
from ...counting import FLOAT_BYTES, attention_flops, linear_flops
from ...registry import register
from .common import at_shortest, projection_params
from .scores.base import ScoreSite
from .sequence import SequenceAttentionOp, SequenceParams, check_score_bias
from ...decoding import Mixes, register_decoding


class ClassParams(SequenceParams):
    kind: Literal["class"]


class ClassAttentionOp(SequenceAttentionOp):
    """Queries from the class tokens, keys and values from all tokens; out: the class tokens."""

    kind = "class"
    Params = ClassParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = super().shape(p, inputs, ctx)
        return tokens(x.prefix, x.channels, prefix=x.prefix)  # [B, N, C] -> [B, prefix, C]: the class tokens

    def check(self, p, inputs: list[TensorType]) -> None:
        x = inputs[0]
        if not x.prefix:
            raise RuleError(f"class attention takes its queries from the class tokens, and these tokens "
                            f"({x.describe()}) have none", field="kind",
                            hint=Remedy("put a class token in front first (`tokens: {count: 1}`, or patchify "
                                        "with `cls_token: true`), or use global attention"))
        if p.rope_theta is not None:
            raise RuleError("rotary embeddings rotate queries and keys by one position each, and class attention's "
                            "queries are only the class tokens", field="rope_theta",
                            hint="give the tokens positions before (patchify's `pos`), or use global attention")
        if p.bias:  # the sequence rule would ask for scores over every token as a query
            check_score_bias(inputs[1], p.heads, x.prefix, x.length)
        super().check(p.model_copy(update={"bias": False}), inputs)

    def score_site(self, p, inputs: list[TensorType]) -> ScoreSite:
        x = inputs[0]
        return ScoreSite(p.heads, self.head_dim(p, x.channels), x.prefix, self.keys(p, inputs), None, x)

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        """The sequence kinds' cost with the products counted for the class tokens as queries,
        not every token."""
        x = inputs[0]
        keys, inner = self.keys(p, inputs), self.inner_width(p, x.channels)
        cost = super().core_cost(p, inputs)
        every = attention_flops(dim_value(x.length), keys, inner)  # what the sequence rule counts
        return Cost(cost.params, cost.flops - every + attention_flops(x.prefix, keys, inner), cost.buffer_bytes)

    def score_bytes(self, p, inputs: list[TensorType]) -> int:
        """The class tokens' scores only: heads x class tokens x keys (at the shortest length)."""
        return FLOAT_BYTES * p.heads * inputs[0].prefix * self.keys(p, [at_shortest(t) for t in inputs])

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        """q and the output projection for the class tokens, k and v for every token."""
        x = inputs[0]
        width, queries, keys = x.channels, x.prefix, self.keys(p, inputs)
        kv_width, inner = self.kv_width(p, width), self.inner_width(p, width)
        core = self.core_cost(p, inputs)
        params = projection_params(width, p, kv_width, inner) + sublayer_params(p, width) + core.params
        flops = linear_flops(queries, width, inner) + linear_flops(keys, width, 2 * kv_width)
        flops += linear_flops(queries, inner, width)
        return Cost(params, flops + core.flops, core.buffer_bytes, self.score_bytes(p, inputs))


CLASS = register(ClassAttentionOp())
register_decoding(CLASS, Mixes("class attention reads every token"))
