"""sinks: attention sinks, a learned logit per head that joins each query's softmax as one more
column and is dropped after it (GPT-OSS; Hugging Face's GptOssAttention `sinks` [heads]).

For a query with scores s_1 .. s_M over its keys and head h's sink logit z_h, the weights are

    exp(s_j) / (exp(z_h) + sum_k exp(s_k))

so a query may give less than all of its attention to the keys (the rest goes to no value). Sequence
attention keeps one fused SDPA call: each sink is one more key whose key and value are zeros and
whose column of the additive mask is the sink's logit (compiler/modules/attention/kernel.py
`sunk`); with other parts that change the scores it is written out (softmax over [scores, sink], the
sink column dropped), after the mask. It decodes with generate()'s cache unchanged (the sink reads
no key).
"""

from __future__ import annotations

from ....base import Cost, Params
from ....registry import register
from .base import DECODES, ScorePart, ScoreSite, register_score_decoding


class SinksParams(Params):
    pass


class SinksPart(ScorePart):
    """A learned logit per head in each query's softmax denominator (GPT-OSS's attention sinks):
    weights exp(s_j) / (exp(sink_h) + Σ exp(s_k)). One fused SDPA call (a zero key and value per
    sink); written out beside parts that change the scores."""

    name = "sinks"
    Params = SinksParams
    explicit = True  # window kinds, whose kernel only adds a bias, refuse it
    fused = True

    def cost(self, p, site: ScoreSite) -> Cost:
        """One logit per head; the extra softmax column's FLOPs are not counted (as the softmax's)."""
        return Cost(site.heads, 0)


SINKS = register(SinksPart())
register_score_decoding(SINKS, DECODES)  # reads no key: the same column at every step
