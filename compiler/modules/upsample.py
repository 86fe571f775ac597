"""upsample (torch): nn.Upsample by an integer factor."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.upsample import UPSAMPLE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


@lowering(UPSAMPLE)
def lower(p, inputs, ctx):
    if p.mode == "nearest":
        return make(nn.Upsample, scale_factor=p.factor, mode="nearest")
    return make(nn.Upsample, scale_factor=p.factor, mode="bilinear", align_corners=p.align_corners)


register_facts(UPSAMPLE, grid=KEEPS, fusion=None, head=None)
