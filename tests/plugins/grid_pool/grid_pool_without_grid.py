"""The same toy op as grid_pool.py under another name, `grid_pool_without_grid`, whose file
forgets its TOKEN_GRID: export with a dynamic size must fail naming it."""

from __future__ import annotations

from archspec.compiler.facts import CLASSIFIER, ONNX_FUSION, RESAMPLE
from archspec.compiler.lowering_rules import lowering
from archspec.compiler.modules.common import make
from archspec.primitives.decoding import Mixes, register_decoding
from archspec.primitives.dtypes import FLOATS, READS
from archspec.primitives.registry import register

from grid_pool import GridPool, GridPoolModule


class GridPoolWithoutGrid(GridPool):
    """grid_pool without its TOKEN_GRID."""

    primitive = "grid_pool_without_grid"


GRID_POOL_WITHOUT_GRID = register(GridPoolWithoutGrid())
register_decoding(GRID_POOL_WITHOUT_GRID, Mixes("grid_pool joins neighbouring tokens"))
READS.register(GRID_POOL_WITHOUT_GRID, FLOATS)  # the dtypes it reads (archspec.primitives.dtypes)


@lowering(GRID_POOL_WITHOUT_GRID)
def lower(p, inputs, ctx):
    return make(GridPoolModule, grid=inputs[0].grid)


ONNX_FUSION.register(GRID_POOL_WITHOUT_GRID, None)
CLASSIFIER.register(GRID_POOL_WITHOUT_GRID, None)
RESAMPLE.register(GRID_POOL_WITHOUT_GRID, None)
