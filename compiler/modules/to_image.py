"""to_image (torch): tokens on a grid -> [B, C, H, W]."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.to_image import TO_IMAGE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class ToImage(nn.Module):
    def __init__(self, grid):
        super().__init__()
        self.grid = tuple(grid)

    def forward(self, x):
        h, w = self.grid
        return x.transpose(1, 2).reshape(x.shape[0], -1, h, w)  # [B, N, C] -> [B, C, H, W]


@lowering(TO_IMAGE)
def lower(p, inputs, ctx):
    return make(ToImage, grid=inputs[0].grid)


register_facts(TO_IMAGE, grid=KEEPS, fusion=None, head=None)
