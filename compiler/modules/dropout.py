"""dropout (torch): nn.Dropout."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.dropout import DROPOUT

from ..lowering_rules import lowering
from .common import make


@lowering(DROPOUT)
def lower(p, inputs, ctx):
    return make(nn.Dropout, p=p.rate)
