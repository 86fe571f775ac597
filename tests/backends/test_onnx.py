"""ONNX for every spec in specs/ (shipped and examples, picked up from the folder): opset 17 or
newer, a dynamic batch, the onnx checker, and onnxruntime agreeing with eager (atol 1e-4) at
batch sizes the export was not traced with. Swin's shifted windows (torch.roll, the shift
mask) are in swin_*; PVT's spatial reduction, CLIP's EOS pooling and the Transformer's
dynamic lengths in theirs."""

from __future__ import annotations

import pytest
import torch

import archspec

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from archspec.compiler.backends.export import example_inputs, other_lengths  # noqa: E402
from archspec.compiler.backends.onnx import expected_fusions, export_onnx  # noqa: E402

from tests.conftest import ALL_SPECS, ROOT, built, spec_id  # noqa: E402

ATOL = 1e-4


@pytest.mark.pipeline
@pytest.mark.parametrize("spec_path", [str(p) for p in ALL_SPECS], ids=[spec_id(p) for p in ALL_SPECS])
def test_onnx_matches_eager_with_a_dynamic_batch(spec_path, tmp_path):
    report, gm = built(spec_path)
    graph = report.graph
    path = str(tmp_path / "model.onnx")
    result = export_onnx(gm, graph, path, verify=False)

    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    assert opset >= 17
    assert [i.name for i in model.graph.input] == [n.name for n in graph.inputs()]
    for value in model.graph.input:
        batch = value.type.tensor_type.shape.dim[0]
        assert batch.dim_param and not batch.HasField("dim_value"), f"{value.name}: batch is not dynamic"
    assert result.nodes == len(model.graph.node)

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    gm.eval()
    # neither batch is the traced one (2); the second run also changes the sequence lengths (traced at 8)
    for batch, lengths in ((1, None), (3, other_lengths(graph))):
        args = example_inputs(graph, batch=batch, lengths=lengths)
        outs = session.run(None, {n.name: a.numpy() for n, a in zip(graph.inputs(), args)})
        with torch.no_grad():
            expected = gm(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        assert len(outs) == len(expected)
        for got, want in zip(outs, expected):
            assert tuple(got.shape) == tuple(want.shape)
            gap = float((torch.from_numpy(got) - want).abs().max())
            print(f"{report.name} batch {batch} lengths {lengths}: max |onnxruntime - eager| {gap:.2e}")
            assert gap < ATOL


@pytest.mark.parametrize("name,expected", [("vit_ti16", {"attention": 12, "gelu": 12}),
                                           ("pvt_v2_b0", {"attention": 8, "gelu": 0}),  # GELU after a depthwise conv
                                           ("llama", {"attention": 4, "gelu": 0}),  # gated SiLU
                                           ("gpt2", {"attention": 12, "gelu": 12})])  # tanh GELU: FastGelu
def test_the_expected_fusions_follow_each_ops_onnx_fusion_fact(name, expected):
    graph = archspec.check(str(ROOT / "specs" / f"{name}.yaml")).graph
    assert expected_fusions(graph) == expected


def test_a_gelu_mlp_without_biases_expects_no_bias_gelu():
    """Falcon's MLP has no bias: ONNX Runtime runs its one Gelu op as it is (the Falcon trial saw
    "fewer fused nodes than the spec implies: Gelu/BiasGelu 0/2")."""
    text = "name: m\ninputs:\n  x: [B, 4, 16]\ngraph:\n  - {id: mlp, mlp: {hidden: 32, bias: false}}\n"
    assert expected_fusions(archspec.check_text(text).graph) == {"attention": 0, "gelu": 0}
    assert expected_fusions(archspec.check_text(text.replace("bias: false", "bias: true")).graph)["gelu"] == 1


def test_a_node_kept_for_its_parameters_alone_expects_no_fused_node():
    """An `unused: true` cross attention is never called, so never exported: the MusicGen trial's
    build said "fewer fused nodes than the spec implies: Attention 2/4"."""
    text = """
name: m
inputs:
  x: [B, 4, 16]
graph:
  - {id: attn, attention: {kind: causal, heads: 2}}
  - {id: cross, from: [attn, attn], unused: true, attention: {kind: cross, heads: 2}}
  - {id: mlp, from: attn, mlp: {hidden: 32}}
"""
    assert expected_fusions(archspec.check_text(text).graph) == {"attention": 1, "gelu": 1}


def test_the_scale_a_gap_is_measured_against_leaves_out_masked_values():
    """Logits masked with float32's lowest (Chameleon's image tokens) made the ONNX check accept
    gaps up to 1e-3 of 3.4e38; the scale is that of the ordinary values."""
    from archspec.compiler.backends.export import largest_magnitude

    logits = torch.tensor([[2.5, -1.0, torch.finfo(torch.float32).min, float("inf")]])
    assert largest_magnitude((logits,)) == 2.5
    assert largest_magnitude((logits.bfloat16(),)) == 2.5
    assert largest_magnitude((torch.tensor([7]),)) == 7.0
