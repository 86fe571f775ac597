"""divide (torch): x / y."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.divide import DIVIDE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Divide(nn.Module):
    def forward(self, x, y):
        return x / y  # broadcast


@lowering(DIVIDE)
def lower(p, inputs, ctx):
    return make(Divide)


register_facts(DIVIDE, grid=KEEPS, fusion=None, head=None)
