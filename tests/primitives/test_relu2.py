"""relu2, ReLU squared (Primer; Hugging Face's ACT2FN["relu2"]: Nemotron, Persimmon), as an mlp's
`act` and an activation's `fn`. The Nemotron user trial wrote it as relu then power 2 (6 nodes
a layer) after the check's hint offered `relu`, which builds a different model silently; here
one mlp node equals Nemotron's MLP (up_proj, relu2, down_proj) and exports to ONNX Runtime."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.cli import EXIT_OK, main

MLP = """
archspec: 1
name: relu2_mlp
inputs:
  x: [B, 5, 16]
graph:
  - {id: mlp, mlp: {hidden: 40, act: relu2, bias: false, norm: none, residual: false}}
"""


def test_an_mlp_with_relu2_equals_nemotrons_mlp():
    transformers = pytest.importorskip("transformers")
    from transformers.models.nemotron.modeling_nemotron import NemotronMLP

    config = transformers.NemotronConfig(hidden_size=16, intermediate_size=40, hidden_act="relu2", mlp_bias=False)
    torch.manual_seed(0)
    ref = NemotronMLP(config).eval()
    model = archspec.build_text(MLP).eval()
    model.load_state_dict({"mlp.fc1.weight": ref.up_proj.weight, "mlp.fc2.weight": ref.down_proj.weight})
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        assert (model(x) - ref(x)).abs().max() < 1e-6
        relu = archspec.build_text(MLP.replace("relu2", "relu")).eval()
        relu.load_state_dict(model.state_dict())
        assert (relu(x) - ref(x)).abs().max() > 1e-2  # relu alone is another model


def test_relu2_as_an_activation_and_through_onnx_runtime(tmp_path):
    pytest.importorskip("onnxruntime")
    text = "archspec: 1\nname: r2\ninputs:\n  x: [B, 7]\ngraph:\n  - {id: out, activation: {fn: relu2}}\n"
    x = torch.linspace(-3, 3, 7)[None].expand(2, 7)
    assert torch.equal(archspec.build_text(text)(x), torch.relu(x) ** 2)
    spec = tmp_path / "r2.yaml"
    spec.write_text(MLP)
    assert main(["build", str(spec), "--target", "onnx", "-o", str(tmp_path / "out")]) == EXIT_OK
