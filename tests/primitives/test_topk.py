"""topk (issue 35): torch.topk's values or indices along an axis, k from params. Against
torch.topk: outputs, node shapes and dtypes, parameters and FLOPs against torch's counts; an
MoE router's choice (Mixtral: softmax, top-k, renormalise) written with it; located errors; the
exports (torch.export with a dynamic batch, ONNX against onnxruntime, TensorRT's operator
coverage) with the helpers of test_every_op.py.

Small specs; all CPU fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx

from tests.primitives.test_every_op import TOL

from tests.conftest import build_counted, checks_shapes, checks_tensorrt_coverage

TOPK = """
name: topk_ops
inputs:
  x: [B, 6, 8]
  noise: [B, 16]
graph:
  - {id: values, from: x, topk: {k: 3}}
  - {id: indices, from: x, topk: {k: 3, output: indices}}
  - {id: lowest_tokens, from: x, topk: {k: 2, axis: 1, largest: false}}
  - {id: lowest_at, from: x, topk: {k: 2, axis: -2, largest: false, output: indices}}
  - {id: kept, from: noise, topk: {k: 4, output: indices}}
  - {id: kept_values, from: noise, topk: {k: 4}}
  - {id: router, from: x, linear: {dim: 4, bias: false}}
  - {id: probs, softmax: {axis: -1}}
  - {id: chosen, topk: {k: 2}}
  - {id: experts, from: probs, topk: {k: 2, output: indices}}
  - {id: total, from: chosen, reduce: {fn: sum, keepdim: true}}
  - {id: weights, from: [chosen, total], divide: {}}
outputs: [values, indices, lowest_tokens, lowest_at, kept, kept_values, weights, experts]
"""


def inputs(batch=2):
    g = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 6, 8, generator=g), torch.rand(batch, 16, generator=g)


def reference(model, x, noise):
    probs = torch.softmax(x @ model.router.weight.t(), dim=-1)
    chosen, experts = torch.topk(probs, 2)
    low = torch.topk(x, 2, dim=1, largest=False)
    top = torch.topk(x, 3)
    kept = torch.topk(noise, 4)
    return (top.values, top.indices, low.values, low.indices, kept.indices, kept.values,
            chosen / chosen.sum(-1, keepdim=True), experts)


def test_against_torch_topk():
    report, model = build_counted(TOPK)
    x, noise = inputs()
    for name, got, want in zip(report.outputs, model(x, noise), reference(model, x, noise), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.allclose(got, want, atol=TOL) if got.is_floating_point() else torch.equal(got, want), name
    checks_shapes(report, model, (x, noise), dtypes=True)


def test_the_types():
    report = archspec.check_text(TOPK)
    t = {name: report.graph.type_of(name) for name in report.outputs}
    assert t["values"].layout == "tokens" and t["values"].shape[1:] == (6, 3) and t["values"].dtype == "float32"
    assert t["indices"].layout == "tensor" and t["indices"].dtype == "int64"
    assert t["lowest_tokens"].layout == "tensor" and t["lowest_tokens"].shape[1:] == (2, 8)
    assert t["kept"].layout == "ids" and t["kept"].shape[1:] == (4,)
    assert t["kept_values"].layout == "vector" and t["kept_values"].shape[1:] == (4,)


def test_the_values_of_a_token_grid_keep_the_grid():
    report = archspec.check_text("name: g\ninputs:\n  image: [B, 3, 16, 16]\ngraph:\n"
                                 "  - {patchify: {patch: 4, dim: 8}}\n  - {id: top, topk: {k: 2}}\n")
    assert report.graph.type_of("top").grid == (4, 4)


def test_params_and_flops():
    report, model = build_counted(TOPK)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs(1))
    assert report.params == 8 * 4
    assert counter.get_total_flops() == report.flops == 2 * 6 * 8 * 4  # the router alone: topk counts none


def test_exports_with_a_dynamic_batch():
    report, model = build_counted(TOPK)
    program = export_program(model, report.graph)
    args = inputs(5)  # not the batch it was traced with
    with torch.no_grad():
        for got, want in zip(program.module()(*args), model(*args), strict=True):
            assert torch.equal(got, want)


def test_onnx_matches_onnxruntime(tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    report, model = build_counted(TOPK)
    path = str(tmp_path / "model.onnx")
    result = export_onnx(model, report.graph, path)
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another
    assert "TopK" in {n.op_type for n in onnx.load(path).graph.node}


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_topk(tmp_path, capsys):
    checks_tensorrt_coverage(TOPK, tmp_path, capsys, batch="1:4:16")


def test_k_may_be_an_expression_and_reach_a_symbolic_length():
    text = ("name: s\nparams: {experts: 8, top: 2}\ndims:\n  L: [4, 64]\ninputs:\n  x: [B, L, 8]\ngraph:\n"
            "  - {id: a, topk: {k: '${top}'}}\n  - {id: b, from: x, topk: {k: 4, axis: 1}}\noutputs: [a, b]\n")
    report, model = build_counted(text)
    x = torch.randn(2, 9, 8)
    a, b = model(x)
    assert torch.equal(b, torch.topk(x, 4, dim=1).values) and torch.equal(a, torch.topk(x, 2).values)


@pytest.mark.parametrize("node, message, hint", [
    ("{topk: {k: 9}}", "topk of 9 along axis -1 of a token sequence [B, 6, 8]: the axis has 8",
     "use a k of at most 8"),
    ("{topk: {k: 2, axis: 0}}", "topk over axis 0, the batch: each sample must stay its own",
     "the first axis of a sample is 1"),
    ("{topk: {k: 2, axis: 3}}", "axis 3 is outside a token sequence [B, 6, 8]", "its axes are 1 to 2"),
    ("{topk: {k: 0}}", "k", None),
    ("{topk: {k: 2, output: both}}", "output", None),
    ("{from: y, topk: {k: 5, axis: 1}}", "topk of 5 along axis 1 of a token sequence [B, L, 8]: the axis has 4 "
                                         "(at its smallest, L = 4)", "use a k of at most 4"),
])
def test_bad_parameters_are_located_errors(node, message, hint):
    text = f"name: bad\ndims:\n  L: [4, 16]\ninputs:\n  x: [B, 6, 8]\n  y: [B, L, 8]\ngraph:\n  - {node}\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert d.loc is not None and d.loc.line == 8
    if hint:
        assert hint in (d.hint or ""), d.hint
