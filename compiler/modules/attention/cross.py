"""attention kind=cross (torch): queries from x, keys and values from `memory`."""

from __future__ import annotations

from archspec.primitives.ops.attention.cross import CROSS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make
from .common import common_args
from ..sublayer import sublayer_args
from .sequence import SequenceAttention, sequence_args


class CrossAttention(SequenceAttention):
    """Queries from x, keys and values (projected by `kv`) from `memory`."""

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, fused=False, **kwargs)

    def body(self, x, memory, padding=None):
        return self.attend(x, memory, padding)


@lowering(CROSS)
def lower(p, inputs, ctx):
    width = inputs[0].channels
    return make(CrossAttention, **common_args(p, width), **sequence_args(p, width), **sublayer_args(p))


register_facts(CROSS, grid=KEEPS, fusion="attention", head=None)
