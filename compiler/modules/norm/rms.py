"""norm kind=rms (torch): RMSNorm over the channels, computed as Hugging Face's Llama does (with
an `offset`, as its Gemma does)."""

from __future__ import annotations

from archspec.primitives.ops.norm.rms import RMS

from ...facts import FEATURE_NORM, KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make
from ..norms import OffsetRMSNorm, RMSNorm


@lowering(RMS)
def lower(p, inputs, ctx):
    if p.offset:
        return make(OffsetRMSNorm, dim=inputs[0].channels, eps=p.eps, offset=p.offset)
    return make(RMSNorm, dim=inputs[0].channels, eps=p.eps)


register_facts(RMS, grid=KEEPS, classifier=None, resample=None)
FEATURE_NORM.register(RMS, True)
