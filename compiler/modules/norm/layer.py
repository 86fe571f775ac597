"""norm kind=layer (torch): a LayerNorm over the channels."""

from __future__ import annotations

from archspec.primitives.ops.norm.layer import LAYER

import torch.nn as nn

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


@lowering(LAYER)
def lower(p, inputs, ctx):
    return make(nn.LayerNorm, normalized_shape=inputs[0].channels, eps=p.eps)


register_facts(LAYER, grid=KEEPS, fusion=None, head=None)
