"""attention kind=global (torch): every token attends to every token (timm ViT Attention)."""

from __future__ import annotations

from archspec.primitives.ops.attention.global_ import GLOBAL

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make
from .common import common_args
from ..sublayer import sublayer_args
from .sequence import SelfAttention, sequence_args


@lowering(GLOBAL)
def lower(p, inputs, ctx):
    width = inputs[0].channels
    return make(SelfAttention, **common_args(p, width), **sequence_args(p, width), **sublayer_args(p))


register_facts(GLOBAL, grid=KEEPS, fusion="attention", head=None)
