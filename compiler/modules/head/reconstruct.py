"""head kind=reconstruct (torch): SimMIM's decoder, a 1x1 conv and a pixel shuffle."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.head.reconstruct import RECONSTRUCT

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class Reconstruct(nn.Module):
    def __init__(self, dim, stride, channels=3, grid=None):
        super().__init__()
        self.grid = tuple(grid) if grid else None  # features as tokens on this grid (else an image)
        self.proj = nn.Conv2d(dim, stride * stride * channels, kernel_size=1)
        self.shuffle = nn.PixelShuffle(stride)

    def forward(self, x):
        if self.grid is not None:
            x = x.transpose(1, 2).reshape(x.shape[0], -1, self.grid[0], self.grid[1])  # [B, N, C] -> [B, C, h, w]
        return self.shuffle(self.proj(x))  # -> [B, s*s*channels, h, w] -> [B, channels, h*s, w*s]


@lowering(RECONSTRUCT)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(Reconstruct, dim=x.channels, stride=p.stride, channels=p.channels,
                grid=x.grid if x.layout == "tokens" else None)


register_facts(RECONSTRUCT, grid=KEEPS, classifier=None, resample=None)
