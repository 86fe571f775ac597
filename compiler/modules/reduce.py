"""reduce (torch): mean, sum, amax or amin over the given axes."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.reduce import REDUCE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make

REDUCTIONS = {"mean": torch.mean, "sum": torch.sum, "max": torch.amax, "min": torch.amin,  # amax: values, many axes
              "norm": torch.linalg.vector_norm}  # L2, its gradient 0 at a zero vector


class Reduce(nn.Module):
    def __init__(self, fn, axes, keepdim=False):
        super().__init__()
        self.fn, self.axes, self.keepdim = fn, tuple(axes), keepdim

    def forward(self, x):
        return REDUCTIONS[self.fn](x, dim=self.axes, keepdim=self.keepdim)  # the axes dropped, or 1 with keepdim

    def extra_repr(self) -> str:
        return f"{self.fn}, axes={self.axes}, keepdim={self.keepdim}"


@lowering(REDUCE)
def lower(p, inputs, ctx):
    rank = len(inputs[0].shape)
    return make(Reduce, fn=p.fn, axes=tuple(axis % rank for axis in p.axes), keepdim=p.keepdim)


register_facts(REDUCE, grid=KEEPS, classifier=None, resample=None)
