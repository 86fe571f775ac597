"""norm kind=affine (torch): x * weight + bias per channel, nothing normalised (MobileBERT's
NoNorm: its state dict's weight and bias)."""

from __future__ import annotations

from archspec.primitives.ops.norm.affine import AFFINE

from ...facts import FEATURE_NORM, KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make
from ..norms import ChannelAffine


@lowering(AFFINE)
def lower(p, inputs, ctx):
    return make(ChannelAffine, channels=inputs[0].channels, bias=p.bias, image=inputs[0].layout == "image")


register_facts(AFFINE, grid=KEEPS, classifier=None, resample=None)
FEATURE_NORM.register(AFFINE, True)  # ResMLP's final norm is an Affine
