"""compare (torch): x compared with a constant, as 0/1."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.compare import COMPARE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make

COMPARISONS = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}
DTYPES = {"float32": torch.float32, "int64": torch.int64}


class Compare(nn.Module):
    def __init__(self, op, value, dtype="float32"):
        super().__init__()
        self.op, self.value, self.dtype = op, value, dtype

    def forward(self, x):
        return COMPARISONS[self.op](x, self.value).to(DTYPES[self.dtype])  # same shape, 0/1


@lowering(COMPARE)
def lower(p, inputs, ctx):
    return make(Compare, op=p.op, value=p.value, dtype=p.dtype)


register_facts(COMPARE, grid=KEEPS, fusion=None, head=None)
