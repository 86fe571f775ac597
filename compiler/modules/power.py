"""power (torch): x ** exponent."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.power import POWER

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Power(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.exponent = exponent

    def forward(self, x):
        return x ** self.exponent

    def extra_repr(self) -> str:
        return f"exponent={self.exponent}"


@lowering(POWER)
def lower(p, inputs, ctx):
    return make(Power, exponent=p.exponent)


register_facts(POWER, grid=KEEPS, fusion=None, head=None)
