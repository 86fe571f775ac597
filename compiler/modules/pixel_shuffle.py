"""pixel_shuffle (torch): nn.PixelShuffle."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.pixel_shuffle import PIXEL_SHUFFLE

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import make


@lowering(PIXEL_SHUFFLE)
def lower(p, inputs, ctx):
    return make(nn.PixelShuffle, upscale_factor=p.factor)


def shuffled_size(p, size):
    """TOKEN_GRID: the image's height and width times the factor (may be torch SymInts while
    exporting with a dynamic image size)."""
    return (size[0] * p.factor, size[1] * p.factor)  # (H, W) -> (H*f, W*f)


register_facts(PIXEL_SHUFFLE, grid=shuffled_size, classifier=None, resample=None)
