"""shift (torch): x + value."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.shift import SHIFT

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Shift(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def forward(self, x):
        return x + self.value

    def extra_repr(self) -> str:
        return f"value={self.value}"


@lowering(SHIFT)
def lower(p, inputs, ctx):
    return make(Shift, value=p.value)


register_facts(SHIFT, grid=KEEPS, fusion=None, head=None)
