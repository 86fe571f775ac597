"""clamp (torch): torch.clamp(x, min, max)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.clamp import CLAMP

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Clamp(nn.Module):
    def __init__(self, low=None, high=None):
        super().__init__()
        self.low, self.high = low, high

    def forward(self, x):
        return torch.clamp(x, self.low, self.high)

    def extra_repr(self) -> str:
        return f"min={self.low}, max={self.high}"


@lowering(CLAMP)
def lower(p, inputs, ctx):
    return make(Clamp, low=p.min, high=p.max)


register_facts(CLAMP, grid=KEEPS, fusion=None, head=None)
