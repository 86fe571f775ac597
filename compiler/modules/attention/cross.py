"""attention kind=cross (torch): queries from x, keys and values from `memory`."""

from __future__ import annotations

from archspec.primitives.ops.attention.cross import CROSS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .sequence import SequenceAttention, make_sequence_attention


class CrossAttention(SequenceAttention):
    """Queries from x, keys and values (projected by `kv`) from `memory`."""

    memory_cache = None  # while generate() decodes: a dict keeping the memory's keys and values

    def __init__(self, dim, heads, learned_query=False, **kwargs):
        super().__init__(dim, heads, fused=False, **kwargs)
        self.learned_query = learned_query  # the queries are a param (batch 1), asked of each sample's memory

    def forward(self, x, memory, *extra):
        if self.learned_query:  # SigLIP's attention-pool probe: one learned query per sample
            x = x.expand(memory.shape[0], -1, -1)  # [1, N, C] -> [B, N, C]
        return super().forward(x, memory, *extra)

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
    kv_dim = inputs[1].channels if inputs[1].channels != inputs[0].channels else None  # kdim (Perceiver)
    return make_sequence_attention(CrossAttention, CROSS, p, inputs, learned_query=inputs[0].shape[0] == 1,
                                   kv_dim=kv_dim)


register_facts(CROSS, grid=KEEPS, classifier=None, resample=None)
