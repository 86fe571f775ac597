"""attention kind=causal (torch): token i attends to tokens 0..i."""

from __future__ import annotations

from archspec.primitives.ops.attention.causal import CAUSAL

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .kernel import AllKeys, later_or_outside
from .sequence import SelfAttention, make_sequence_attention


class CausalMask(AllKeys):
    """kind=causal: token i sees tokens 0..i (SDPA's is_causal when no key is padded)."""

    causal = hides_some = decodes = True

    def hides(self, query, key):
        return later_or_outside(query, key)  # later keys are hidden


@lowering(CAUSAL)
def lower(p, inputs, ctx):
    return make_sequence_attention(SelfAttention, CAUSAL, p, inputs, keys=CausalMask())


register_facts(CAUSAL, grid=KEEPS, classifier=None, resample=None)
