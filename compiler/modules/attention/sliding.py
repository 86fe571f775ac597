"""attention kind=sliding (torch): causal attention to the last `window` tokens (Mistral)."""

from __future__ import annotations

from archspec.primitives.ops.attention.sliding import SLIDING

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .kernel import AllKeys, later_or_outside
from .sequence import SelfAttention, make_sequence_attention


class SlidingMask(AllKeys):
    """kind=sliding: token i sees tokens i - window + 1 .. i."""

    hides_some = decodes = True

    def __init__(self, window: int):
        self.window = window

    def hides(self, query, key):
        return later_or_outside(query, key, self.window)  # later keys, and keys more than window - 1 back


@lowering(SLIDING)
def lower(p, inputs, ctx):
    return make_sequence_attention(SelfAttention, SLIDING, p, inputs, keys=SlidingMask(p.window))


register_facts(SLIDING, grid=KEEPS, classifier=None, resample=None)
