"""pad (torch): F.pad of an image, or of a token grid read as one."""

from __future__ import annotations

import torch.nn.functional as F

from archspec.primitives.base import size_pair
from archspec.primitives.ops.pad import PAD, padded

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import make
from .layout import OnImage, grid_of


class Pad(OnImage):
    """`to_multiple` ((mh, mw), the amounts made from each input's size) or `sides` (top, bottom,
    left, right); `grid`: None for an image [B, C, H, W], the (H, W) of a token grid [B, H*W, C]."""

    def __init__(self, value, to_multiple=None, sides=None, grid=None):
        super().__init__(grid)
        self.value = value
        self.to_multiple = tuple(to_multiple) if to_multiple is not None else None
        self.sides = tuple(sides) if sides is not None else None

    def image(self, x):
        if self.sides is not None:
            top, bottom, left, right = self.sides
        else:  # the bottom and the right up to the multiples (mh, mw)
            top, bottom, left, right = 0, -x.shape[2] % self.to_multiple[0], 0, -x.shape[3] % self.to_multiple[1]
        return F.pad(x, (left, right, top, bottom), value=self.value)  # [B, C, H, W] -> [B, C, H', W']


@lowering(PAD)
def lower(p, inputs, ctx):
    x = inputs[0]
    multiple = None if p.to_multiple is None else list(size_pair(p.to_multiple))
    return make(Pad, value=p.value, to_multiple=multiple, sides=None if p.sides is None else list(p.sides),
                grid=grid_of(x))


register_facts(PAD, grid=padded, classifier=None, resample=None)
