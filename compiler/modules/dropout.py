"""dropout (torch): nn.Dropout."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.dropout import DROPOUT

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


@lowering(DROPOUT)
def lower(p, inputs, ctx):
    return make(nn.Dropout, p=p.rate)


register_facts(DROPOUT, grid=KEEPS, fusion=None, head=None)
