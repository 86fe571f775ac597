"""pool (torch): avg_pool2d / max_pool2d over an image, or over a token grid read as one."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.pool import POOL, pooled, window

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import grid_as_image, image_as_tokens, make


class Pool(nn.Module):
    """`grid`: None for an image [B, C, H, W] -> [B, C, H', W']; the (H, W) of a token grid
    [B, H*W, C] -> [B, H'*W', C]."""

    def __init__(self, fn, kernel, stride, padding, count_include_pad, grid=None):
        super().__init__()
        self.fn, self.kernel, self.stride, self.padding = fn, tuple(kernel), tuple(stride), tuple(padding)
        self.count_include_pad, self.grid = count_include_pad, tuple(grid) if grid is not None else None

    def forward(self, x):
        if self.grid is not None:
            x = grid_as_image(x, self.grid)  # [B, HW, C] -> [B, C, H, W]
        if self.fn == "mean":
            x = F.avg_pool2d(x, self.kernel, self.stride, self.padding,
                             count_include_pad=self.count_include_pad)  # [B, C, H, W] -> [B, C, H', W']
        else:
            x = F.max_pool2d(x, self.kernel, self.stride, self.padding)  # [B, C, H, W] -> [B, C, H', W']
        if self.grid is not None:
            x = image_as_tokens(x)  # [B, C, H', W'] -> [B, H'W', C]
        return x


@lowering(POOL)
def lower(p, inputs, ctx):
    x = inputs[0]
    kernel, stride, padding = window(p)
    return make(Pool, fn=p.fn, kernel=list(kernel), stride=list(stride), padding=list(padding),
                count_include_pad=p.count_include_pad, grid=x.grid if x.layout == "tokens" else None)


register_facts(POOL, grid=pooled, fusion=None, head=None)
