"""upsample (torch): nn.Upsample by an integer factor."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.upsample import UPSAMPLE

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import make


@lowering(UPSAMPLE)
def lower(p, inputs, ctx):
    if p.mode == "nearest":
        return make(nn.Upsample, scale_factor=p.factor, mode="nearest")
    return make(nn.Upsample, scale_factor=p.factor, mode="bilinear", align_corners=p.align_corners)


def upsampled_size(p, size):
    """TOKEN_GRID: the image's height and width times the factor (may be torch SymInts while
    exporting with a dynamic image size)."""
    return (size[0] * p.factor, size[1] * p.factor)  # (H, W) -> (H*f, W*f)


register_facts(UPSAMPLE, grid=upsampled_size, fusion=None, head=None)
