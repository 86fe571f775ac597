"""attention kind=shifted (torch): window attention after a cyclic shift of the grid, with the
mask that keeps regions that were not neighbours apart (the module is window.py's)."""

from __future__ import annotations

from archspec.primitives.ops.attention.shifted import SHIFTED

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .window import bias_table, window_module


@lowering(SHIFTED)
def lower(p, inputs, ctx):
    return window_module(SHIFTED, p, inputs[0], inputs)


register_facts(SHIFTED, grid=KEEPS, classifier=None, resample=bias_table)
