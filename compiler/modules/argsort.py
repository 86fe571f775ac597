"""argsort (torch): the order that sorts each row."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.argsort import ARGSORT

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Argsort(nn.Module):
    def __init__(self, descending=False):
        super().__init__()
        self.descending = descending

    def forward(self, x):
        return torch.argsort(x, dim=-1, descending=self.descending)  # [B, N] int64


@lowering(ARGSORT)
def lower(p, inputs, ctx):
    return make(Argsort, descending=p.descending)


register_facts(ARGSORT, grid=KEEPS, classifier=None, resample=None)
