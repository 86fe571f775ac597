"""resize (torch): F.interpolate to a fixed height and width."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.base import size_pair
from archspec.primitives.ops.resize import RESIZE

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import make


class Resize(nn.Module):
    def __init__(self, size: tuple[int, int], mode: str, align_corners: bool):
        super().__init__()
        self.size, self.mode = size, mode
        self.align_corners = None if mode == "nearest" else align_corners  # torch refuses it for nearest

    def forward(self, x):
        return F.interpolate(x, size=self.size, mode=self.mode, align_corners=self.align_corners)  # [B, C, h, w]

    def extra_repr(self) -> str:
        return f"size={self.size}, mode={self.mode!r}" + (", align_corners=True" if self.align_corners else "")


@lowering(RESIZE)
def lower(p, inputs, ctx):
    return make(Resize, size=size_pair(p.size), mode=p.mode, align_corners=p.align_corners)


register_facts(RESIZE, grid=lambda p, size: size_pair(p.size), fusion=None, head=None)
