"""Export with a dynamic image height and width (compiler/backends/export.py, SizeRange): the
program is exported at one size and run at others, against eager models built at those sizes.
PVT v2 has no position embedding and takes any size its sr-ratios divide; Swin's windows and
ViT's learned positions fix the grid, and export says so plainly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import archspec
from archspec.compiler.backends.export import (SizeRange, dynamic_shapes, example_inputs, export_program,
                                               grids_for, max_abs_difference)
from archspec.core.errors import UsageError
from archspec.language.compose import compose
from archspec.language.loader import load_file
from archspec.sizes import SizeSolver, find_knob

ROOT = Path(__file__).resolve().parent.parent
PVT = str(ROOT / "specs" / "pvt_v2_b0.yaml")


def solver(path: str) -> SizeSolver:
    doc = compose(load_file(path))
    return SizeSolver(doc, find_knob(doc))


def test_the_solver_gives_the_range_an_export_may_take():
    assert solver(PVT).export_range(112, 448) == (125, 448, 32)  # 125-128, 157-160, ...: every 32 passes
    assert solver(str(ROOT / "specs" / "pvt_v2_b2_li.yaml")).export_range(112, 448) == (193, 448, 1)
    assert solver(str(ROOT / "specs" / "swin_t.yaml")).export_range(224, 672) == (224, 672, 224)
    assert solver(str(ROOT / "specs" / "vit_b16.yaml")).export_range(64, 512) == (64, 512, 16)
    assert solver(str(ROOT / "specs" / "swin_t.yaml")).export_range(230, 440) is None


def test_size_range():
    r = SizeRange(64, 320, 32)
    assert r.steps == (2, 10) and r.example(224) == 224 and r.example(1000) == 320 and r.example(10) == 64
    for lo, hi, step in ((65, 90, 32), (112, 448, 224), (1, 40, 32)):
        with pytest.raises(UsageError, match="two multiples"):
            SizeRange(lo, hi, step)


def test_dynamic_shapes_name_height_and_width():
    graph = archspec.check(PVT).graph
    shapes = dynamic_shapes(graph, (1, 64), SizeRange(64, 320, 32))
    assert set(shapes["image"]) == {0, 2, 3}
    assert "height_steps" in str(shapes["image"][2]) and "width_steps" in str(shapes["image"][3])


def test_grids_follow_the_input_size():
    graph = archspec.check(PVT).graph
    grids = grids_for(graph, (160, 288))
    assert grids["patch_embed"] == (40, 72) and grids["stages.3.downsample"] == (5, 9)
    assert grids["stages.3.blocks.1.mlp"] == (5, 9) and grids["head"] is None


@pytest.mark.parametrize("name,sizes", [("pvt_v2_b0", (160, 288)), ("examples/detector_backbone", (448, 640))])
def test_exported_at_one_size_runs_at_others(name, sizes):
    path = str(ROOT / "specs" / f"{name}.yaml")
    gm = archspec.build(path, seed=0).eval()
    graph = archspec.check(path).graph
    lo, hi, step = solver(path).export_range(sizes[0] - 32, sizes[1] + 32)
    program = export_program(gm, graph, batch_range=(1, 64), size_range=SizeRange(lo, hi, step))
    assert gm.get_submodule("stages.0.blocks.0.attn").grid == graph.type_of("stages.0.blocks.0.attn").grid
    for size in sizes:
        eager = archspec.build(path, overrides={"img": size}, seed=0).eval()
        eager.load_state_dict(gm.state_dict())
        (x,) = example_inputs(graph, batch=3, size=size)
        with torch.no_grad():
            assert max_abs_difference(program.module()(x), eager(x)) < 1e-4
    (x,) = example_inputs(graph, batch=2, size=(sizes[0], sizes[1]))  # each side on its own
    with torch.no_grad():
        program.module()(x)


@pytest.mark.parametrize("name,size_range", [("swin_t", SizeRange(224, 672, 224)), ("vit_ti16", SizeRange(64, 320, 16))])
def test_a_model_that_fixes_its_grid_says_so(name, size_range):
    path = str(ROOT / "specs" / f"{name}.yaml")
    gm = archspec.build(path, seed=0).eval()
    with pytest.raises(UsageError, match="cannot take a dynamic image size.*export it at one size"):
        export_program(gm, archspec.check(path).graph, size_range=size_range)
