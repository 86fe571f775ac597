"""add (torch): x + y (+ more), left to right."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.add import ADD

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Add(nn.Module):
    def forward(self, x, *others):
        for y in others:
            x = x + y  # broadcast
        return x


@lowering(ADD)
def lower(p, inputs, ctx):
    return make(Add)


register_facts(ADD, grid=KEEPS, fusion=None, head=None)
