"""attention kind=cross (torch): queries from x, keys and values from `memory`."""

from __future__ import annotations

from typing import NamedTuple

import torch

from archspec.primitives.ops.attention.cross import CROSS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .sequence import SequenceAttention, make_sequence_attention


class ProjectedMemory(NamedTuple):
    """The memory's keys and values, projected once ([B, h_kv, M, d] each): what generate's
    decode cache keeps for a cross attention layer (compiler/generate/cache.py) and hands it
    in place of the memory at every step."""

    keys: torch.Tensor
    values: torch.Tensor


class CrossAttention(SequenceAttention):
    """Queries from x, keys and values (projected by `kv`) from `memory`. Its forward takes
    `cache`, where generate keeps this layer's projected memory (compiler/generate/cache.py's
    KeptMemory): then the memory (the encoder's output, the same at every step) is projected at
    the first step only."""

    def __init__(self, dim, heads, learned_query=False, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.learned_query = learned_query  # the queries are a param (batch 1), asked of each sample's memory

    def forward(self, x, memory, *extra, cache=None):
        if self.learned_query:  # SigLIP's attention-pool probe: one learned query per sample
            x = x.expand(memory.shape[0], -1, -1)  # [1, N, C] -> [B, N, C]
        return super().forward(x, memory, *extra, cache=cache)

    def project(self, x, memory=None, positions=()):
        """As SequenceAttention's; a memory already projected (ProjectedMemory) is used as it is."""
        if isinstance(memory, ProjectedMemory):
            return self.queries(x), memory.keys, memory.values  # [B, h, N, d], 2 x [B, h_kv, M, d]
        return super().project(x, memory, positions)

    def body(self, x, memory, *extra, cache=None):
        positions, extra = self.split_positions(extra)  # the queries' and the memory's (qk_positions)
        bias, padding = self.split_extra(extra)
        if cache is not None:  # never with positions: such a layer does not decode (cross_decoding)
            memory = cache.project(self, memory)  # projected at the first step only: 2 x [B, h_kv, M, d]
        return self.attend(x, memory, padding, bias, positions=positions)


@lowering(CROSS)
def lower(p, inputs, ctx):
    return make_sequence_attention(CrossAttention, CROSS, p, inputs, learned_query=inputs[0].shape[0] == 1,
                                   memory_width=inputs[1].channels)  # kdim where it differs (Perceiver)


register_facts(CROSS, grid=KEEPS, classifier=None, resample=None)
