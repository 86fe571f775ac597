"""attention kind=sliding (torch): causal attention to the last `window` tokens (Mistral)."""

from __future__ import annotations

from archspec.primitives.ops.attention.sliding import SLIDING

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .common import CachedAttention
from .sequence import SelfAttention, later_or_outside, make_sequence_attention


class SlidingWindowAttention(CachedAttention, SelfAttention):
    """Token i attends to tokens i - window + 1 .. i."""

    def __init__(self, dim, heads, window, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.window = window

    def hidden_at(self, query, key):
        return later_or_outside(query, key, self.window)  # later keys, and keys more than window - 1 back


@lowering(SLIDING)
def lower(p, inputs, ctx):
    return make_sequence_attention(SlidingWindowAttention, SLIDING, p, inputs, window=p.window)


register_facts(SLIDING, grid=KEEPS, classifier=None, resample=None)
