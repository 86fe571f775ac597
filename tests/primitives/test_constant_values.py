"""constant `values`: a small fixed table written in the spec (Swin2SR's per-channel image mean,
OWL-ViT's box bias), and the warning for `fill: index` along an axis of size 1 (the OWL-ViT
trial's `along: 3` on [G, G, 1] made every value 0: `along` counts from the batch)."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """name: centred
inputs:
  image: [B, 3, 4, 4]
graph:
  - {id: mean, constant: {shape: [3, 1, 1], values: [0.4488, 0.4371, 0.4040]}}
  - {id: centred, from: [image, mean], subtract: {}}
"""


def test_the_values_in_order_as_a_buffer_and_in_model_py(tmp_path):
    model = archspec.build_text(SPEC, seed=0)
    x = torch.rand(2, 3, 4, 4)
    assert torch.equal(model(x), x - torch.tensor([0.4488, 0.4371, 0.4040]).view(1, 3, 1, 1))
    assert "mean.value" not in model.state_dict()  # made by the spec, not loaded
    table = archspec.build_text("name: t\ninputs: {x: [B, 2, 3]}\ngraph:\n"
                                "  - {id: t, constant: {shape: [2, 3], values: [1, 2, 3, 4, 5, 6]}}\n"
                                "  - {from: [x, t], add: {}}\n", seed=0)
    assert torch.equal(table.t.value, torch.arange(1.0, 7.0).view(1, 2, 3))  # the last axis fastest
    from archspec.cli.main import main

    (tmp_path / "centred.yaml").write_text(SPEC)
    assert main(["build", str(tmp_path / "centred.yaml"), "-o", str(tmp_path / "out")]) == 0
    assert "values=[0.4488, 0.4371, 0.404]" in (tmp_path / "out" / "model.py").read_text()


@pytest.mark.parametrize("values,words", [
    ("values: [1.0, 2.0]", "`values` gives 2 numbers, and shape \\[3, 1, 1\\] holds 3"),
    ("values: [1, 2, 3], fill: ones", "a constant takes `values` or `fill`, not both"),
    ("values: [1, .nan, 3]", "'.nan' is not a finite number"),  # refused as the file is read
])
def test_refusals(values, words):
    with pytest.raises(archspec.SpecError, match=words):
        archspec.check_text(SPEC.replace("values: [0.4488, 0.4371, 0.4040]", values))


def test_an_index_along_an_axis_of_size_1_warns():
    report = archspec.check_text("name: t\ninputs: {x: [B, 4, 4, 1]}\ngraph:\n"
                                 "  - {id: col, constant: {shape: [4, 4, 1], fill: index, along: 3}}\n"
                                 "  - {from: [x, col], add: {}}\n")
    (warning,) = report.graph.warnings
    assert warning.message == "fill: index along axis 3, of size 1: every value is 0"


def test_a_param_starts_at_a_value_given():
    """ResMLP's LayerScale starts at 1e-4; `param` took zeros, ones or a normal init only."""
    model = archspec.build_text("name: p\ninputs: {x: [B, 4, 8]}\ngraph:\n"
                                "  - {id: ls, param: {shape: [8], init: value, value: 1.0e-4}}\n"
                                "  - {from: [x, ls], multiply: {}}\n", seed=0)
    assert torch.equal(model.ls.value, torch.full((1, 8), 1e-4)) and model.ls.value.requires_grad
    with pytest.raises(archspec.SpecError, match="init: value starts every value at `value`: give both"):
        archspec.check_text("name: p\ninputs: {x: [B, 4, 8]}\ngraph:\n  - {id: ls, param: {shape: [8], value: 2.0}}\n"
                            "  - {from: [x, ls], multiply: {}}\n")
