"""pool (torch): avg_pool2d / max_pool2d over an image, or over a token grid read as one;
adaptive_avg_pool2d / adaptive_max_pool2d with `output`."""

from __future__ import annotations

import torch.nn.functional as F

from archspec.primitives.base import size_pair
from archspec.primitives.ops.pool import POOL, pooled, window

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import make
from .layout import OnImage, grid_of


class Pool(OnImage):
    """`grid`: None for an image [B, C, H, W] -> [B, C, H', W']; the (H, W) of a token grid
    [B, H*W, C] -> [B, H'*W', C]."""

    def __init__(self, fn, kernel=(), stride=(), padding=(), count_include_pad=True, grid=None, output=None):
        super().__init__(grid)
        self.fn, self.kernel, self.stride, self.padding = fn, tuple(kernel), tuple(stride), tuple(padding)
        self.count_include_pad, self.output = count_include_pad, None if output is None else tuple(output)

    def image(self, x):
        if self.output is not None and self.fn == "mean":
            return F.adaptive_avg_pool2d(x, self.output)  # [B, C, H, W] -> [B, C, h, w]
        if self.output is not None:
            return F.adaptive_max_pool2d(x, self.output)  # [B, C, H, W] -> [B, C, h, w]
        if self.fn == "mean":
            return F.avg_pool2d(x, self.kernel, self.stride, self.padding,
                                count_include_pad=self.count_include_pad)  # [B, C, H, W] -> [B, C, H', W']
        return F.max_pool2d(x, self.kernel, self.stride, self.padding)  # [B, C, H, W] -> [B, C, H', W']


@lowering(POOL)
def lower(p, inputs, ctx):
    x = inputs[0]
    if p.output is not None:
        return make(Pool, fn=p.fn, grid=grid_of(x), output=list(size_pair(p.output)))
    kernel, stride, padding = window(p)
    return make(Pool, fn=p.fn, kernel=list(kernel), stride=list(stride), padding=list(padding),
                count_include_pad=p.count_include_pad, grid=grid_of(x))


register_facts(POOL, grid=pooled, classifier=None, resample=None)
