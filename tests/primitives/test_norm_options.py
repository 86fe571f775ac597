"""The norm options of issue 35: `bias: false` for every norm kind that has a bias (layer,
batch), and a LayerNorm over an image's channels (timm's LayerNorm2d: [B, C, H, W] normalised
over C at every pixel). Each against torch's or timm's module with the same weights: outputs,
node shapes, parameters and FLOPs against the checker's; the exports (torch.export with a
dynamic batch, ONNX against onnxruntime, TensorRT's operator coverage), with the helpers of
test_every_op.py; the standalone model.py; and the located error for an image an RMSNorm reads.

Small specs; all CPU fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx

from tests.conftest import build_counted, checks_shapes, checks_tensorrt_coverage, perturb_constants, standalone_copy
from tests.primitives.test_every_op import TOL

NORMS = """
name: norm_options
inputs:
  image: [B, 8, 6, 5]
  x: [B, 7, 8]
graph:
  - {id: ln2d, from: image, norm: {}}
  - {id: ln2d_no_bias, from: image, norm: {kind: layer, bias: false, eps: 1.0e-6}}
  - {id: ln_no_bias, from: x, norm: {bias: false}}
  - {id: ln, from: x, norm: {bias: true}}
  - {id: bn2d_no_bias, from: image, norm: {kind: batch, bias: false}}
  - {id: bn_tokens_no_bias, from: x, norm: {kind: batch, bias: false, eps: 1.0e-3}}
  - {id: pooled, from: x, reduce: {fn: mean, axes: [1]}}
  - {id: bn_vector_no_bias, norm: {kind: batch, bias: false}}
  - {id: ln_vector_no_bias, from: pooled, norm: {bias: false}}
  - {id: affine, from: x, norm: {kind: affine}}
  - {id: affine2d_no_bias, from: image, norm: {kind: affine, bias: false}}
outputs: [ln2d, ln2d_no_bias, ln_no_bias, ln, bn2d_no_bias, bn_tokens_no_bias, bn_vector_no_bias, ln_vector_no_bias,
          affine, affine2d_no_bias]
"""


def built():
    report, model = build_counted(NORMS)
    return report, perturb_constants(model).eval()


def inputs(batch=2):
    return torch.randn(batch, 8, 6, 5), torch.randn(batch, 7, 8)


def reference(model, image, x, training=False):
    """NORMS written out with torch's and timm's modules, the model's tensors loaded."""
    timm_layers = pytest.importorskip("timm.layers")
    m = dict(model.named_modules())

    def load(ref, name):
        ref.load_state_dict(m[name].state_dict())
        return ref.train(training)

    ln2d = load(timm_layers.LayerNorm2d(8, eps=1e-5), "ln2d")  # timm's default eps is 1e-6, torch's 1e-5
    ln2d_no_bias = load(timm_layers.LayerNorm2d(8, eps=1e-6, bias=False), "ln2d_no_bias")
    ln_no_bias = load(torch.nn.LayerNorm(8, bias=False), "ln_no_bias")
    ln = load(torch.nn.LayerNorm(8), "ln")
    bn = m["bn2d_no_bias"]
    bn2d = F.batch_norm(image, bn.running_mean.clone(), bn.running_var.clone(), bn.weight, None, training, 0.1, 1e-5)
    bt = m["bn_tokens_no_bias"]
    tokens = F.batch_norm(x.flatten(0, 1), bt.running_mean.clone(), bt.running_var.clone(), bt.weight, None,
                          training, 0.1, 1e-3).view_as(x)
    bv = m["bn_vector_no_bias"]
    pooled = x.mean(1)
    vector = F.batch_norm(pooled, bv.running_mean.clone(), bv.running_var.clone(), bv.weight, None, training, 0.1, 1e-5)
    resmlp = pytest.importorskip("timm.models.mlp_mixer")
    affine = resmlp.Affine(8).train(training)  # ResMLP's alpha [1, 1, C] and beta: our weight and bias
    affine.load_state_dict({"alpha": m["affine"].weight.view(1, 1, 8), "beta": m["affine"].bias.view(1, 1, 8)})
    return (ln2d(image), ln2d_no_bias(image), ln_no_bias(x), ln(x), bn2d, tokens, vector,
            F.layer_norm(pooled, (8,), m["ln_vector_no_bias"].weight, None, 1e-5), affine(x),
            image * m["affine2d_no_bias"].weight.view(8, 1, 1))


def test_the_parameters_are_torchs():
    report, model = built()
    names = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert names == {
        "ln2d.weight": (8,), "ln2d.bias": (8,), "ln2d_no_bias.weight": (8,), "ln_no_bias.weight": (8,),
        "ln.weight": (8,), "ln.bias": (8,),
        "bn2d_no_bias.weight": (8,), "bn2d_no_bias.running_mean": (8,), "bn2d_no_bias.running_var": (8,),
        "bn_tokens_no_bias.weight": (8,), "bn_tokens_no_bias.running_mean": (8,),
        "bn_tokens_no_bias.running_var": (8,), "bn_vector_no_bias.weight": (8,),
        "bn_vector_no_bias.running_mean": (8,), "bn_vector_no_bias.running_var": (8,),
        "ln_vector_no_bias.weight": (8,), "affine.weight": (8,), "affine.bias": (8,), "affine2d_no_bias.weight": (8,)}
    assert report.params == 8 * 2 + 8 + 8 + 8 * 2 + 8 + 8 + 8 + 8 + 8 * 2 + 8
    rows = {row.path: row.params for row in report.nodes}
    assert rows["ln2d"] == 16 and rows["ln2d_no_bias"] == 8 and rows["bn2d_no_bias"] == 8


@pytest.mark.parametrize("training", [False, True])
def test_against_torch_and_timm(training):
    report, model = built()
    image, x = inputs()
    want = reference(model, image, x, training)
    got = model.train(training)(image, x)
    for name, g, w in zip(report.outputs, got, want, strict=True):
        assert g.shape == w.shape and torch.allclose(g, w, atol=TOL), name
    model.eval()
    checks_shapes(report, model, (image, x))


def test_flops_match_torchs_count():
    report, model = built()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs(1))
    assert counter.get_total_flops() == report.flops == 0


def test_a_layer_norm2d_trains_its_weight_and_bias():
    _, model = built()
    model.train()
    image, x = inputs()
    sum(o.square().sum() for o in model(image, x)).backward()
    assert model.ln2d.weight.grad is not None and model.ln2d.bias.grad is not None
    assert model.bn2d_no_bias.bias is None and model.bn2d_no_bias.weight.grad is not None


def test_exports_with_a_dynamic_batch():
    report, model = built()
    program = export_program(model, report.graph)
    args = inputs(5)  # not the batch it was traced with
    with torch.no_grad():
        for got, want in zip(program.module()(*args), model(*args), strict=True):
            assert torch.allclose(got, want, atol=TOL)


def test_onnx_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    report, model = built()
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_norm(tmp_path, capsys):
    checks_tensorrt_coverage(NORMS, tmp_path, capsys, batch="1:4:16")


def test_the_standalone_model_py_gives_the_same(tmp_path):
    report, model = built()
    again = standalone_copy(model, report.name, report.file, tmp_path)
    again.load_state_dict(model.state_dict())
    args = inputs()
    with torch.no_grad():
        for got, want in zip(again(*args), model(*args), strict=True):
            assert torch.equal(got, want)


def test_a_checkpoint_with_a_bias_does_not_load_into_a_norm_without_one():
    _, model = built()
    state = model.state_dict()
    state["ln_no_bias.bias"] = torch.zeros(8)
    with pytest.raises(RuntimeError, match="ln_no_bias.bias"):
        model.load_state_dict(state)


@pytest.mark.parametrize("node, message", [
    ("{from: image, norm: {kind: rms}}", "norm needs tokens or a feature vector, got an image"),
    ("{from: x, norm: {kind: rms, bias: false}}", "unknown key 'bias'"),
    ("{from: x, norm: {bias: 0}}", "bias"),
])
def test_what_is_still_refused(node, message):
    text = f"name: bad\ninputs:\n  image: [B, 8, 6, 5]\n  x: [B, 7, 8]\ngraph:\n  - {node}\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert message in info.value.diagnostics[0].message, info.value.diagnostics[0].message


def test_a_sublayer_with_an_affine_norm_is_resmlps_channel_mlp():
    """norm_kind: affine on an mlp: x + ls * mlp(alpha * x + beta), ResMLP's channel half (the
    ResMLP trial wrote it as three nodes, a standalone affine norm, the mlp and an add)."""
    mixer = pytest.importorskip("timm.models.mlp_mixer")
    block = mixer.ResBlock(24, seq_len=16, mlp_ratio=4, norm_layer=mixer.Affine, init_values=1e-4).eval()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    spec = "name: r\ninputs: {x: [B, 16, 24]}\ngraph:\n  - {id: mlp, mlp: {ratio: 4, norm_kind: affine, layer_scale: 1.0e-4}}\n"
    model = archspec.build_text(spec, seed=0).eval()
    model.load_state_dict({"mlp.norm.weight": block.norm2.alpha.view(24), "mlp.norm.bias": block.norm2.beta.view(24),
                           "mlp.layer_scale.gamma": block.ls2, "mlp.fc1.weight": block.mlp_channels.fc1.weight,
                           "mlp.fc1.bias": block.mlp_channels.fc1.bias, "mlp.fc2.weight": block.mlp_channels.fc2.weight,
                           "mlp.fc2.bias": block.mlp_channels.fc2.bias})
    x = torch.randn(2, 16, 24)
    with torch.no_grad():
        want = x + block.ls2 * block.mlp_channels(block.norm2(x))
        assert torch.allclose(model(x), want, atol=1e-6)
    assert archspec.check_text(spec).params == 24 * 2 + 24 + (24 * 96 + 96) + (96 * 24 + 24)
    with pytest.raises(archspec.SpecError, match="norm_eps goes with a norm that normalises"):
        archspec.check_text(spec.replace("layer_scale: 1.0e-4", "layer_scale: 1.0e-4, norm_eps: 1.0e-6"))
