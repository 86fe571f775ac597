"""topk (torch): torch.topk's values or indices along one axis (sorted, as its default)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.topk import TOPK

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class TopK(nn.Module):
    def __init__(self, k, axis=-1, largest=True, indices=False):
        super().__init__()
        self.k, self.axis, self.largest, self.indices = k, axis, largest, indices

    def forward(self, x):
        values, indices = torch.topk(x, self.k, dim=self.axis, largest=self.largest, sorted=True)  # k along axis
        return indices if self.indices else values

    def extra_repr(self) -> str:
        return f"k={self.k}, axis={self.axis}, largest={self.largest}, {'indices' if self.indices else 'values'}"


@lowering(TOPK)
def lower(p, inputs, ctx):
    rank = len(inputs[0].shape)
    return make(TopK, k=p.k, axis=p.axis % rank, largest=p.largest, indices=p.output == "indices")


register_facts(TOPK, grid=KEEPS, classifier=None, resample=None)
