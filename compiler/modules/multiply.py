"""multiply (torch): x * y."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.multiply import MULTIPLY

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Multiply(nn.Module):
    def forward(self, x, y):
        return x * y  # broadcast


@lowering(MULTIPLY)
def lower(p, inputs, ctx):
    return make(Multiply)


register_facts(MULTIPLY, grid=KEEPS, fusion=None, head=None)
