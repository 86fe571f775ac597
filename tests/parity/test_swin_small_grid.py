"""Swin's windows on a grid that is not square, Hugging Face's rule beside timm's. timm clamps
per axis: a side no larger than the window gets a window of that side and no shift, the other
axis is shifted as ever. Hugging Face's Swin and DonutSwin (set_shift_and_window_size): when the
shorter side is no larger than the window, nothing is shifted and the window is that side on
both axes. The Donut trial's 128x64 image (an 8x4 grid, window 4) came out 1.3e-4 off Hugging
Face's, with no word; `small_grid: whole` is its rule.

Against transformers' SwinLayer with every parameter perturbed: the same layer with timm's rule
gives other outputs there, so the comparison can fail; on a square grid the two agree."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """
name: hf_swin_layer
inputs: {x: {shape: [B, GH * GW, 32], grid: [GH, GW]}}
graph:
  - {id: attn, attention: {kind: shifted, heads: 2, window: 4, RULE}}
  - {id: mlp, mlp: {ratio: 4}}
"""


def spec(grid: tuple[int, int], rule: str) -> str:
    text = SPEC.replace("GH * GW", str(grid[0] * grid[1])).replace("GH", str(grid[0])).replace("GW", str(grid[1]))
    return text.replace("RULE", f"small_grid: {rule}")


def hugging_faces_layer(grid):
    from transformers import SwinConfig
    from transformers.models.swin.modeling_swin import SwinLayer

    torch.manual_seed(0)
    config = SwinConfig(window_size=4, embed_dim=32, num_heads=[2], depths=[2], mlp_ratio=4.0, layer_norm_eps=1e-5)
    layer = SwinLayer(config, 32, grid, 2, shift_size=2).eval()
    perturb_everything(layer, seed=1, scale=0.1)
    return layer


def ours(layer, grid, rule: str):
    model = archspec.build_text(spec(grid, rule)).eval()
    theirs = layer.state_dict()
    state = {"attn.norm." + k.split(".")[-1]: v for k, v in theirs.items() if k.startswith("layernorm_before")}
    state |= {"mlp.norm." + k.split(".")[-1]: v for k, v in theirs.items() if k.startswith("layernorm_after")}
    state |= {k: v for k, v in theirs.items() if k.startswith("mlp.")}
    state |= {f"attn.qkv.{w}": torch.cat([theirs[f"attention.{n}_proj.{w}"] for n in "qkv"]) for w in ("weight", "bias")}
    state |= {f"attn.proj.{w}": theirs[f"attention.o_proj.{w}"] for w in ("weight", "bias")}
    state["attn.position_bias.table"] = theirs["attention.relative_position_bias.relative_position_bias_table"]
    assert set(state) == set(model.state_dict())  # every tensor of ours; theirs: q, k, v fused
    model.load_state_dict(state)
    return model


@pytest.mark.parametrize("grid", [(8, 4), (4, 8)])
def test_hugging_faces_rule_on_a_grid_that_is_not_square(grid):
    layer = hugging_faces_layer(grid)
    x = torch.randn(2, grid[0] * grid[1], 32)
    with torch.no_grad():
        theirs = layer(x, grid)
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs
        whole = ours(layer, grid, "whole")(x)
        per_axis = ours(layer, grid, "per_axis")(x)
    assert (whole - theirs).abs().max() < 1e-5
    assert (per_axis - theirs).abs().max() > 1e-3  # timm's rule shifts the longer axis here


def test_the_rules_agree_on_a_square_grid():
    layer = hugging_faces_layer((8, 8))
    x = torch.randn(2, 64, 32)
    with torch.no_grad():
        theirs = layer(x, (8, 8))
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs
        assert (ours(layer, (8, 8), "whole")(x) - theirs).abs().max() < 1e-5
        assert (ours(layer, (8, 8), "per_axis")(x) - theirs).abs().max() < 1e-5


def test_a_shorter_side_that_does_not_divide_the_longer_is_a_located_error():
    with pytest.raises(SpecError) as info:
        archspec.check_text(spec((8, 3), "whole"))
    assert "the window is the grid's shorter side, 3" in info.value.diagnostics[0].message
    assert info.value.diagnostics[0].loc is not None
