"""attention kind=cross (torch): queries from x, keys and values from `memory`."""

from __future__ import annotations

from archspec.primitives.ops.attention.cross import CROSS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .sequence import SequenceAttention, attention_fusion, make_sequence_attention


class CrossAttention(SequenceAttention):
    """Queries from x, keys and values (projected by `kv`) from `memory`."""

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, fused=False, **kwargs)

    def body(self, x, memory, *extra):
        bias, padding = self.split_extra(extra)
        return self.attend(x, memory, padding, bias)


@lowering(CROSS)
def lower(p, inputs, ctx):
    return make_sequence_attention(CrossAttention, CROSS, p, inputs)


register_facts(CROSS, grid=KEEPS, fusion=attention_fusion, head=None)
