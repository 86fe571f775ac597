"""conv with `norm: batch` and `act`: a ConvModule in one node (conv, BatchNorm over the output
channels, activation), the 3-node block the UperNet trial wrote 13 times. Against Hugging Face's
UperNetConvModule with the same perturbed weights and running statistics, in eval and in a
training step (the running statistics move alike); on a token grid; parameter counts; ONNX
Runtime; the plain conv keeps its module and state-dict keys."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """name: cm
inputs: {image: [B, 6, 9, 9]}
graph:
  - {id: c, conv: {out: 8, kernel: 3, padding: 1, bias: false, norm: batch, norm_eps: 1.0e-5, act: relu}}
"""


def reference_and_ours():
    pytest.importorskip("transformers")
    from transformers.models.upernet.modeling_upernet import UperNetConvModule

    reference = UperNetConvModule(6, 8, kernel_size=3, padding=1)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in reference.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.3 * torch.randn(tensor.shape, generator=generator).abs())
    ours = archspec.build_text(SPEC, seed=0)
    ours.load_state_dict({"c.conv.weight": reference.conv.weight,
                          **{f"c.norm.{k}": v for k, v in reference.batch_norm.state_dict().items()}})
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    assert archspec.check_text(SPEC).params == sum(p.numel() for p in reference.parameters())
    return reference, ours


def test_it_is_hugging_faces_conv_module_in_eval_and_in_training():
    reference, ours = reference_and_ours()
    x = torch.randn(2, 6, 9, 9, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours.eval()(x) - reference.eval()(x)).abs().max() < 1e-5
        trained = ours.train()(x), reference.train()(x)  # batch statistics, running ones updated
    assert (trained[0] - trained[1]).abs().max() < 1e-5
    assert torch.allclose(ours.c.norm.running_mean, reference.batch_norm.running_mean, atol=1e-6)


def test_on_a_token_grid_it_gives_tokens():
    text = SPEC.replace("graph:\n", "graph:\n  - {id: t, to_tokens: {}}\n")
    model = archspec.build_text(text, seed=0).eval()
    image = archspec.build_text(SPEC, seed=0).eval()
    image.load_state_dict(model.state_dict())
    x = torch.randn(2, 6, 9, 9, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(model(x), image(x).flatten(2).transpose(1, 2), atol=1e-6)


def test_onnx_runtime_gives_the_same(tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    _, ours = reference_and_ours()
    result = export_onnx(ours.eval(), archspec.check_text(SPEC).graph, str(tmp_path / "cm.onnx"), verify=True)
    assert result.max_difference is not None and result.max_difference < 1e-4, result.summary()


def test_a_plain_conv_keeps_its_keys():
    plain = archspec.build_text(SPEC.replace(", norm: batch, norm_eps: 1.0e-5, act: relu", ""), seed=0)
    assert list(plain.state_dict()) == ["c.conv.weight"] and plain.c.norm is None and plain.c.act is None


def test_the_standalone_model_py_gives_the_same(tmp_path):
    import subprocess
    import sys

    from archspec.compiler.backends.source import standalone_source

    from tests.conftest import NO_ARCHSPEC

    _, ours = reference_and_ours()
    ours.eval()
    (tmp_path / "model.py").write_text(standalone_source(ours, "cm", "cm.yaml"))
    torch.save(ours.state_dict(), tmp_path / "weights.pt")
    x = torch.randn(2, 6, 9, 9, generator=torch.Generator().manual_seed(3))
    torch.save(x, tmp_path / "x.pt")
    script = NO_ARCHSPEC + (f"import torch, model\nm = model.{type(ours).__name__}().eval()\n"
                            "m.load_state_dict(torch.load('weights.pt'))\n"
                            "torch.save(m(torch.load('x.pt')), 'out.pt')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    with torch.no_grad():
        assert torch.equal(torch.load(tmp_path / "out.pt"), ours(x))
