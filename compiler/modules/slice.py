"""slice (torch): a range of tokens, channels, or a tensor's axis."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.slice import SLICE, slice_axis

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Slice(nn.Module):
    def __init__(self, dim, start, stop=None):
        super().__init__()
        self.dim, self.start, self.stop = dim, start, stop

    def forward(self, x):
        size = x.shape[self.dim]
        start = self.start + size if self.start < 0 else self.start  # negative: from the end
        stop = size if self.stop is None else (self.stop + size if self.stop < 0 else self.stop)
        return x.narrow(self.dim, start, stop - start)  # dim -> stop - start


@lowering(SLICE)
def lower(p, inputs, ctx):
    return make(Slice, dim=slice_axis(p, inputs[0]), start=p.start, stop=p.stop)


register_facts(SLICE, grid=KEEPS, classifier=None, resample=None)
