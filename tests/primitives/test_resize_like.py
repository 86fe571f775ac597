"""resize `like: true`: an image interpolated to the height and width of a second image
(Hugging Face's `interpolate(residual, size=hidden_state.shape[2:])`, DPT's fusion residuals; the
DPT trial wrote the sizes as two 110-character conv-arithmetic expressions). Against torch's
F.interpolate; under a dynamic image size the size follows the other image, where a fixed
`size` is named as what holds the program to one grid."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.export import SizeRange, example_inputs, export_program, one_grid_parts

FUSION = """
name: fusion
params: {img: 40}
inputs:
  image: [B, 3, img, img]
graph:
  - {id: fine, conv: {out: 8, kernel: 3, padding: 1}}
  - {id: coarse, from: image, conv: {out: 8, kernel: 3, stride: 2, padding: 1}}
  - {id: up, from: [coarse, fine], resize: {like: true, mode: bilinear, align_corners: false}}
  - {id: fused, from: [fine, up], add: {}}
"""


def test_it_is_torchs_interpolate_to_the_other_images_size():
    model = archspec.build_text(FUSION, seed=0).eval()
    x = torch.randn(2, 3, 40, 40, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fine, coarse = model.fine(x), model.coarse(x)
        want = fine + F.interpolate(coarse, size=(40, 40), mode="bilinear", align_corners=False)
        assert torch.equal(model(x), want)
    assert str(archspec.check_text(FUSION).graph.type_of("up").shape[2]) == "40"


def test_a_dynamic_image_size_carries_through_it():
    report = archspec.check_text(FUSION)
    model = archspec.build_text(FUSION, seed=0).eval()
    program = export_program(model, report.graph, batch_range=(1, 8), size_range=SizeRange(16, 64, 1))
    for side in (17, 33, 64):
        eager = archspec.build_text(FUSION, {"img": side}, seed=0).eval()
        eager.load_state_dict(model.state_dict())
        (x,) = example_inputs(report.graph, batch=2, size=side)
        with torch.no_grad():
            assert (program.module()(x) - eager(x)).abs().max() < 1e-5


def test_size_and_like_are_one_or_the_other_and_like_reads_an_image():
    with pytest.raises(archspec.SpecError, match="resize takes `size` or `like: true`, one of them"):
        archspec.check_text(FUSION.replace("like: true,", "like: true, size: 8,"))
    with pytest.raises(archspec.SpecError, match="resize takes `size` or `like: true`, one of them"):
        archspec.check_text(FUSION.replace("like: true,", "").replace("from: [coarse, fine]", "from: coarse"))
    tokens = FUSION.replace("from: [coarse, fine]", "from: [coarse, tokens]").replace(
        "  - {id: up,", "  - {id: tokens, from: fine, to_tokens: {}}\n  - {id: up,")
    with pytest.raises(archspec.SpecError, match="like: true takes its height and width from an image"):
        archspec.check_text(tokens)
    fixed = FUSION.replace("like: true,", "size: 40,").replace("from: [coarse, fine]", "from: coarse")
    assert "a fixed size (up)" in one_grid_parts(archspec.check_text(fixed).graph)
