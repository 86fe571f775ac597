"""attention kind=causal (torch): token i attends to tokens 0..i."""

from __future__ import annotations

from archspec.primitives.ops.attention.causal import CAUSAL

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .common import CachedAttention
from .sequence import SelfAttention, later_or_outside, make_sequence_attention


class CausalSelfAttention(CachedAttention, SelfAttention):
    """kind=causal: token i attends to tokens 0..i (SDPA's is_causal when no key is padded)."""

    causal = True

    def hidden_at(self, query, key):
        return later_or_outside(query, key)  # later keys are hidden


@lowering(CAUSAL)
def lower(p, inputs, ctx):
    return make_sequence_attention(CausalSelfAttention, CAUSAL, p, inputs)


register_facts(CAUSAL, grid=KEEPS, classifier=None, resample=None)
