"""subtract (torch): x - y."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.subtract import SUBTRACT

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Subtract(nn.Module):
    def forward(self, x, y):
        return x - y  # broadcast


@lowering(SUBTRACT)
def lower(p, inputs, ctx):
    return make(Subtract)


register_facts(SUBTRACT, grid=KEEPS, fusion=None, head=None)
