"""scale (torch): x * factor."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.scale import SCALE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Scale(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor}"


@lowering(SCALE)
def lower(p, inputs, ctx):
    return make(Scale, factor=p.factor)


register_facts(SCALE, grid=KEEPS, fusion=None, head=None)
