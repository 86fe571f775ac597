"""attention kind=global (torch): every token attends to every token (timm ViT Attention)."""

from __future__ import annotations

from archspec.primitives.ops.attention.global_ import GLOBAL

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .sequence import SelfAttention, make_sequence_attention


@lowering(GLOBAL)
def lower(p, inputs, ctx):
    extra = {"merge_heads": p.merge_heads} if p.merge_heads != "head_major" else {}  # model.py as before
    return make_sequence_attention(SelfAttention, GLOBAL, p, inputs, **extra)


register_facts(GLOBAL, grid=KEEPS, classifier=None, resample=None)
