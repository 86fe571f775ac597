"""A toy op that changes the token grid, for tests/core/test_facts.py: `grid_pool`, a 2x2 average
pool over the grid. Like a plugin, one file registers its rules, its lowering and its facts
(the TOKEN_GRID that `archspec build --size` follows)."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.compiler.facts import register_facts
from archspec.compiler.lowering_rules import lowering
from archspec.compiler.modules.common import make
from archspec.core.types import TensorType, grid_tokens
from archspec.primitives.base import Cost, Op, Params, RuleError
from archspec.primitives.decoding import Mixes, register_decoding
from archspec.primitives.dtypes import FLOATS, READS
from archspec.primitives.registry import register


class GridPoolParams(Params):
    pass


class GridPool(Op):
    """The average of each 2x2 neighbourhood of a token grid: grid / 2."""

    primitive = "grid_pool"
    Params = GridPoolParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "tokens" or x.grid is None or x.prefix or x.grid[0] % 2 or x.grid[1] % 2:
            raise RuleError(f"grid_pool reads an even token grid, got {x.layout_name()}")
        return grid_tokens((x.grid[0] // 2, x.grid[1] // 2), x.channels)  # [B, HW/4, C]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


class GridPoolModule(nn.Module):
    def __init__(self, grid):
        super().__init__()
        self.grid = tuple(grid)

    def forward(self, x):
        h, w = self.grid
        x = x.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w)  # [B, HW, C] -> [B, C, H, W]
        x = F.avg_pool2d(x, 2)  # -> [B, C, H/2, W/2]
        return x.flatten(2).transpose(1, 2)  # -> [B, HW/4, C]


def pooled_grid(p, grid):
    return grid[0] // 2, grid[1] // 2  # (H, W) -> (H/2, W/2)


GRID_POOL = register(GridPool())
register_decoding(GRID_POOL, Mixes("grid_pool joins neighbouring tokens"))
READS.register(GRID_POOL, FLOATS)  # the dtypes it reads (archspec.primitives.dtypes)


@lowering(GRID_POOL)
def lower(p, inputs, ctx):
    return make(GridPoolModule, grid=inputs[0].grid)


register_facts(GRID_POOL, grid=pooled_grid, fusion=None, classifier=None, resample=None)
