"""pixel_shuffle (torch): nn.PixelShuffle."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.pixel_shuffle import PIXEL_SHUFFLE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


@lowering(PIXEL_SHUFFLE)
def lower(p, inputs, ctx):
    return make(nn.PixelShuffle, upscale_factor=p.factor)


register_facts(PIXEL_SHUFFLE, grid=KEEPS, fusion=None, head=None)
