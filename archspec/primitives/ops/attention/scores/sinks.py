"""sinks: attention sinks, a learned logit per head that joins each query's softmax as one more
column and is dropped after it (GPT-OSS; Hugging Face's GptOssAttention `sinks` [heads]).

For a query with scores s_1 .. s_M over its keys and head h's sink logit z_h, the weights are

    exp(s_j) / (exp(z_h) + sum_k exp(s_k))

so a query may give less than all of its attention to the keys (the rest goes to no value). The
part writes the attention out (softmax over [scores, sink], the sink column dropped), after the
mask; it decodes with generate()'s cache unchanged (the sink reads no key).
"""

from __future__ import annotations

from ....base import Cost, Params
from .base import DECODES, ScorePart, ScoreSite, register_score, register_score_decoding


class SinksParams(Params):
    pass


class SinksPart(ScorePart):
    """A learned logit per head in each query's softmax denominator (GPT-OSS's attention sinks):
    weights exp(s_j) / (exp(sink_h) + Σ exp(s_k)). Written out."""

    name = "sinks"
    Params = SinksParams
    explicit = True

    def cost(self, p, site: ScoreSite) -> Cost:
        """One logit per head; the extra softmax column's FLOPs are not counted (as the softmax's)."""
        return Cost(site.heads, 0)


SINKS = register_score(SinksPart())
register_score_decoding(SINKS, DECODES)  # reads no key: the same column at every step
