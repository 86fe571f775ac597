"""An input's token grid takes expressions over params, as its shape does (the Swin2SR trial:
`grid: ["${gh}", "${gw}"]` was refused as 'must be an integer'); a symbolic side is a located
error."""

from __future__ import annotations

import pytest

import archspec
from archspec.core.errors import SpecError

SPEC = """
name: g
params: {gh: 4, gw: 2}
dims: {L: [1, 8]}
inputs: {x: {shape: [B, "${gh * gw}", 8], grid: GRID}}
graph:
  - {id: a, attention: {kind: window, heads: 2, window: 2}}
"""


def test_a_grid_of_expressions_is_the_params():
    report = archspec.check_text(SPEC.replace("GRID", '["${gh}", "${gw}"]'), {"gh": 6})
    assert report.graph.type_of("x").grid == (6, 2)


def test_a_grid_side_of_a_symbolic_size_is_a_located_error():
    with pytest.raises(SpecError) as info:
        archspec.check_text(SPEC.replace("GRID", "[4, L]"))
    problem = info.value.diagnostics[0]
    assert problem.message == "a token grid's sides are fixed numbers" and problem.loc.line == 5
