"""norm kind=rms (torch): RMSNorm over the channels, computed as Hugging Face's Llama does."""

from __future__ import annotations

from archspec.primitives.ops.norm.rms import RMS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make
from ..norms import RMSNorm


@lowering(RMS)
def lower(p, inputs, ctx):
    return make(RMSNorm, dim=inputs[0].channels, eps=p.eps)


register_facts(RMS, grid=KEEPS, fusion=None, head=None)
