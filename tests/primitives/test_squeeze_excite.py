"""squeeze_excite against timm's SEModule (the state dict loads as it is; the same outputs), over
an image and over a token grid, its FLOPs against FlopCounterMode, and where it refuses. The GC
ViT trial wrote each squeeze-excite as six nodes, 66 of its spec's 165."""

from __future__ import annotations

import pytest
import torch
from timm.layers.squeeze_excite import SEModule
from torch.utils.flop_counter import FlopCounterMode

import archspec

SPEC = """name: se
inputs:
  image: [B, 24, 7, 5]
graph:
  - {id: se, squeeze_excite: {hidden: 8}}
  - {id: grid, to_tokens: {}}
  - {id: se2, squeeze_excite: {hidden: 6, act: silu, gate: hardsigmoid, bias: false}}
outputs: [se, se2]
"""


def test_the_same_as_timms_se_module_over_an_image_and_a_token_grid():
    model = archspec.build_text(SPEC, seed=0).eval()
    ref = SEModule(24, rd_channels=8).eval()
    ref.load_state_dict(model.se.state_dict())
    ref2 = SEModule(24, rd_channels=6, bias=False, act_layer=torch.nn.SiLU, gate_layer="hard_sigmoid").eval()
    ref2.load_state_dict(model.se2.state_dict())
    x = torch.randn(2, 24, 7, 5)
    with torch.no_grad():
        image, grid = model(x)
        assert torch.allclose(image, ref(x), atol=1e-6)
        assert torch.allclose(grid, ref2(ref(x)).flatten(2).transpose(1, 2), atol=1e-6)  # [2, 35, 24]
    report = archspec.check_text(SPEC)
    assert report.params == sum(p.numel() for p in ref.parameters()) + sum(p.numel() for p in ref2.parameters())
    assert report.graph.type_of("se2").grid == (7, 5)


def test_flops_are_what_flop_counter_mode_counts():
    model = archspec.build_text(SPEC, seed=0).eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randn(1, 24, 7, 5))
    assert archspec.check_text(SPEC).flops == counter.get_total_flops()


def test_a_grid_with_a_class_token_is_refused():
    text = """name: se
inputs:
  image: [B, 3, 16, 16]
graph:
  - {patchify: {patch: 4, dim: 8, cls_token: true}}
  - {squeeze_excite: {hidden: 4}}
"""
    with pytest.raises(archspec.SpecError, match="squeeze_excite needs a token grid without class tokens"):
        archspec.check_text(text)
