"""expand (issue 35): torch's Tensor.expand to a shape that may be symbolic (B, a declared dim),
the symbolic sizes taken at run time from a second input. Against Tensor.expand: outputs, node
shapes, parameters and FLOPs; a batch-1 param concatenated to a batch; located errors; the
exports (torch.export with a dynamic batch and length, ONNX against onnxruntime, TensorRT's
operator coverage).

Small specs; all CPU fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx

from tests.conftest import build_counted, checks_shapes, checks_tensorrt_coverage


EXPAND = """
name: expand_ops
dims:
  L: [4, 32]
inputs:
  x: [B, 6, 8]
  y: [B, L, 8]
graph:
  - {id: cls, param: {shape: [1, 8]}}
  - {id: cls_b, from: [cls, x], expand: {shape: [B, 1, 8]}}
  - {id: joined, from: [cls_b, x], concat: {}}
  - {id: rows, from: [cls, y], expand: {shape: [B, L, -1]}}
  - {id: like_y, from: [cls, y], expand: {}}
  - {id: fixed, from: cls, expand: {shape: [1, 5, 8]}}
  - {id: scaled, from: [rows, y], multiply: {}}
  - {id: kept, from: x, expand: {shape: [-1, 6, 8]}}
outputs: [joined, rows, like_y, fixed, scaled, kept]
"""


def inputs(batch=2, length=7):
    g = torch.Generator().manual_seed(batch * 100 + length)
    return torch.randn(batch, 6, 8, generator=g), torch.randn(batch, length, 8, generator=g)


def reference(model, x, y):
    cls = model.cls.value  # [1, 1, 8]
    rows = cls.expand(y.shape[0], y.shape[1], 8)
    return (torch.cat([cls.expand(x.shape[0], 1, 8), x], dim=1), rows, cls.expand_as(y), cls.expand(1, 5, 8),
            rows * y, x)


@pytest.mark.parametrize("batch, length", [(2, 7), (3, 12)])
def test_against_tensor_expand(batch, length):
    report, model = build_counted(EXPAND)
    x, y = inputs(batch, length)
    for name, got, want in zip(report.outputs, model(x, y), reference(model, x, y), strict=True):
        assert got.shape == want.shape and torch.equal(got, want), name
    checks_shapes(report, model, (x, y), {"B": batch, "L": length})


def test_the_types():
    report = archspec.check_text(EXPAND)
    t = report.graph.type_of
    assert tuple(map(str, t("cls_b").shape)) == ("B", "1", "8") and t("cls_b").layout == "tokens"
    assert tuple(map(str, t("joined").shape)) == ("B", "7", "8")
    assert tuple(map(str, t("rows").shape)) == ("B", "L", "8") and t("like_y") == t("y")
    assert t("fixed").shape == (1, 5, 8) and t("kept") == t("x")


def test_a_grid_is_kept_where_the_tokens_stay_and_like_gives_its_own():
    report = archspec.check_text("""name: g
inputs:
  image: [B, 3, 16, 16]
graph:
  - {id: tokens, patchify: {patch: 4, dim: 8}}
  - {id: table, param: {shape: [16, 8]}}
  - {id: per_sample, from: [table, tokens], expand: {shape: [B, 16, 8]}}
  - {id: as_tokens, from: [table, tokens], expand: {}}
  - {id: cls, param: {shape: [1, 8]}}
  - {id: cls_b, from: [cls, tokens], expand: {shape: [B, -1, -1]}}
outputs: [per_sample, as_tokens, cls_b]
""")
    t = report.graph.type_of
    assert t("as_tokens").grid == (4, 4)  # like's layout: the same shape
    assert t("cls_b").grid is None and t("cls_b").shape[1] == 1


def test_params_flops_and_no_copy():
    report, model = build_counted(EXPAND)
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(*inputs(1))
    assert report.params == 8 and counter.get_total_flops() == report.flops == 0
    assert out[1].data_ptr() == model.cls.value.data_ptr()  # a view of the param


def test_exports_with_a_dynamic_batch_and_length():
    report, model = build_counted(EXPAND)
    program = export_program(model, report.graph)
    for args in (inputs(5, 9), inputs(3, 17)):  # neither the batch nor the length it was traced with
        with torch.no_grad():
            for got, want in zip(program.module()(*args), model(*args), strict=True):
                assert torch.equal(got, want)


def test_onnx_matches_onnxruntime(tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    report, model = build_counted(EXPAND)
    path = str(tmp_path / "model.onnx")
    result = export_onnx(model, report.graph, path)
    assert result.max_difference is not None and result.max_difference < 1e-4  # at another batch and length
    assert "Expand" in {n.op_type for n in onnx.load(path).graph.node}


def test_onnxruntime_at_two_lengths(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    report, model = build_counted(EXPAND)
    path = str(tmp_path / "model.onnx")
    export_onnx(model, report.graph, path)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for batch, length in ((2, 5), (4, 20)):
        x, y = inputs(batch, length)
        got = session.run(None, dict(zip(names, (x.numpy(), y.numpy()))))
        for g, want in zip(got, model(x, y), strict=True):
            assert torch.allclose(torch.from_numpy(g), want.detach(), atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_expand(tmp_path, capsys):
    checks_tensorrt_coverage(EXPAND, tmp_path, capsys, batch="1:4:16")


@pytest.mark.parametrize("node, message, hint", [
    ("{from: [p, x], expand: {shape: [B, 8]}}", "expand keeps the rank: [1, 1, 8] has 3 axes, shape [B, 8] 2",
     "add axes of 1 with rearrange"),
    ("{from: [p, x], expand: {shape: [B, Q, 8]}}", "unknown size 'Q' in expand's shape", "(here: L)"),
    ("{from: x, expand: {shape: [-1, 6, 16]}}", "axis 2 of [B, 6, 8] has size 8 and cannot become 16",
     "give 8 or -1 there"),
    ("{from: p, expand: {shape: [4, 1, 8]}}", "axis 0 of expand's shape is the batch: B, 1 or -1, got 4", None),
    ("{from: [p, x], expand: {shape: [B, L, 8]}}",
     "expand to [B, L, 8]: the size L (axis 1) is taken from a second input that has an axis of that size; "
     "`like` [B, 6, 8] has none", "read one that holds L"),
    ("{from: [x, y], expand: {}}", "expand: axis 1 of [B, 6, 8] has size 6 and cannot become L", None),
    ("{from: p, expand: {shape: [B, 1, 8]}}", "expand reads 2 input(s)", None),
    ("{from: p, expand: {shape: [1, 0, 8]}}", "expand's sizes are positive numbers, -1, B or a dim; got 0", None),
])
def test_bad_parameters_are_located_errors(node, message, hint):
    text = (f"name: bad\ndims:\n  L: [4, 16]\ninputs:\n  x: [B, 6, 8]\n  y: [B, L, 8]\ngraph:\n"
            f"  - {{id: p, param: {{shape: [1, 8]}}}}\n  - {node}\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert d.loc is not None and d.loc.line == 9
    if hint:
        assert hint in (d.hint or ""), d.hint
