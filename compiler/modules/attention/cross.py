"""attention kind=cross (torch): queries from x, keys and values from `memory`."""

from __future__ import annotations

from archspec.primitives.ops.attention.cross import CROSS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .sequence import SequenceAttention, attention_fusion, make_sequence_attention


class CrossAttention(SequenceAttention):
    """Queries from x, keys and values (projected by `kv`) from `memory`."""

    memory_cache = None  # while generate() decodes: a dict keeping the memory's keys and values

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, fused=False, **kwargs)

    def project(self, x, memory=None):
        """As SequenceAttention's; while generate() decodes, the memory (the encoder's output,
        the same at every step) is projected at the first step only and kept."""
        if self.memory_cache is None or memory is None:
            return super().project(x, memory)
        if "keys" not in self.memory_cache:
            self.memory_cache["keys"], self.memory_cache["values"] = self.memory_keys_values(memory)
        kept = self.memory_cache
        return self.queries(x), kept["keys"], kept["values"]  # [B, h, N, d], 2 x [B, h_kv, M, d]

    def body(self, x, memory, *extra):
        bias, padding = self.split_extra(extra)
        return self.attend(x, memory, padding, bias)


@lowering(CROSS)
def lower(p, inputs, ctx):
    return make_sequence_attention(CrossAttention, CROSS, p, inputs)


register_facts(CROSS, grid=KEEPS, fusion=attention_fusion, head=None)
