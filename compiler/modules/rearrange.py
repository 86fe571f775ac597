"""rearrange (torch): reshape to one dimension per axis, permute, reshape to the output's groups."""

from __future__ import annotations

import math

import torch.nn as nn

from archspec.primitives.ops.rearrange import REARRANGE, plan_of, rearranged_grid

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import make


class Rearrange(nn.Module):
    """`split`: for each input dimension, the sizes of its axes (None: the one the dimension
    gives, divided by the others); `grid_dim`: the dimension whose two axes are the rows and
    columns of the token grid `grid` instead; `order`: the axes in the output's order;
    `counts`: how many axes each output dimension merges (0 for a size-1 one)."""

    def __init__(self, split, order, counts, grid_dim=None, grid=None):
        super().__init__()
        self.split, self.order, self.counts = tuple(split), tuple(order), tuple(counts)
        self.grid_dim, self.grid = grid_dim, tuple(grid) if grid else None

    def forward(self, x):
        sizes = self.axis_sizes(x)
        x = x.reshape(sizes)  # [B, ...] -> one dimension per axis
        x = x.permute(self.order)  # the axes in the output's order
        return x.reshape(self.merged([sizes[i] for i in self.order]))  # one dimension per output group

    def axis_sizes(self, x):
        sizes = []
        for d, parts in enumerate(self.split):
            if d == self.grid_dim:
                sizes += self.grid
                continue
            known = math.prod([size for size in parts if size is not None])  # a list: dynamo traces no generator here
            sizes += [x.shape[d] // known if size is None else size for size in parts]
        return sizes

    def merged(self, sizes):
        dims, start = [], 0
        for count in self.counts:
            dims.append(math.prod(sizes[start:start + count]))
            start += count
        return dims


@lowering(REARRANGE)
def lower(p, inputs, ctx):
    plan = plan_of(p, inputs[0])
    left, right = plan.pattern.left, plan.pattern.right
    return make(Rearrange, split=tuple(tuple(p.sizes.get(axis) for axis in group) for group in left.groups),
                order=tuple(left.axes.index(axis) for axis in right.axes),
                counts=tuple(len(group) for group in right.groups),
                grid_dim=plan.grid_dim, grid=inputs[0].grid if plan.grid_dim is not None else None)


register_facts(REARRANGE, grid=rearranged_grid, classifier=None, resample=None)
