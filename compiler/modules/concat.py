"""concat (torch): torch.cat along the tokens, the channels or a numbered axis."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.concat import CONCAT, concat_axis

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Concat(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, *xs):
        return torch.cat(xs, dim=self.dim)


@lowering(CONCAT)
def lower(p, inputs, ctx):
    if isinstance(p.along, int):
        return make(Concat, dim=concat_axis(p, inputs[0]))  # [..., sum of the sizes on that axis, ...]
    if p.along == "tokens":
        return make(Concat, dim=1)  # [B, N, C]
    return make(Concat, dim=1 if inputs[0].layout == "image" else -1)  # [B, C, H, W] or [..., C]


register_facts(CONCAT, grid=KEEPS, classifier=None, resample=None)
