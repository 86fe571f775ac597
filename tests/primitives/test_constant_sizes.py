"""constant with symbolic sizes (issue 35): `shape: [L, L]` builds the tensor at each call at
the length of the tensor the node reads, so one build runs at every length in range and exports
with a symbolic length. A causal mask from two `fill: index` constants, compared: the values
at two lengths, the types, no buffer kept, the decode fact, located errors, torch.export with a
dynamic batch and length (torch.export Dims), ONNX Runtime at two lengths, TensorRT coverage,
the standalone model.py.

Small specs; all CPU fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import archspec
from archspec.compiler.backends.export import dynamic_shapes, export_program
from archspec.compiler.backends.onnx import export_onnx
from archspec.primitives.decoding import NO_TOKENS, Mixes, decode_of



from tests.conftest import build_counted, checks_tensorrt_coverage, standalone_copy

MASK = """
name: causal_mask
dims:
  L: [4, 64]
inputs:
  x: [B, L, 8]
graph:
  - {id: query_at, from: x, constant: {shape: [L, L], fill: index, along: 1}}
  - {id: key_at, from: x, constant: {shape: [L, L], fill: index}}
  - {id: ahead, from: [key_at, query_at], subtract: {}}
  - {id: future, compare: {op: gt, value: 0}}
  - {id: scores, from: [x, x], einsum: {eq: "b q d, b k d -> b q k"}}
  - {id: penalty, from: future, scale: {factor: -1.0e9}}
  - {id: masked, from: [scores, penalty], add: {}}
  - {id: probs, softmax: {axis: -1}}
  - {id: attended, from: [probs, x], einsum: {eq: "b q k, b k d -> b q d"}}
  - {id: eye, from: x, constant: {shape: [3, L, L], fill: eye}}
  - {id: halves, from: x, constant: {shape: [L, 2], value: 0.5}}
  - {id: ones, from: x, constant: {shape: [2, L], fill: ones}}
  - {id: zeros, from: x, constant: {shape: [L]}}
  - {id: fixed, constant: {shape: [4], fill: ones}}
outputs: [future, attended, eye, halves, ones, zeros, fixed]
"""


def reference(x):
    length = x.shape[1]
    future = torch.triu(torch.ones(length, length), 1)  # 1 where the key comes after the query
    scores = (x @ x.transpose(1, 2)).masked_fill(future.bool(), float("-inf"))
    return (future[None], scores.softmax(-1) @ x, torch.eye(length).expand(1, 3, length, length),
            torch.full((1, length, 2), 0.5), torch.ones(1, 2, length), torch.zeros(1, length), torch.ones(1, 4))


@pytest.fixture(scope="module")
def built():
    return build_counted(MASK)


def test_one_build_runs_at_two_lengths_with_the_right_values(built):
    report, model = built
    for batch, length in ((2, 5), (3, 13)):
        x = torch.randn(batch, length, 8)
        for name, got, want in zip(report.outputs, model(x), reference(x), strict=True):
            assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5), (name, length)


def test_the_types_and_no_buffer(built):
    report, model = built
    t = report.graph.type_of
    assert tuple(map(str, t("future").shape)) == ("1", "L", "L") and t("future").layout == "tensor"
    assert tuple(map(str, t("eye").shape)) == ("1", "3", "L", "L")
    assert tuple(map(str, t("masked").shape)) == ("B", "L", "L")
    assert report.graph.node("query_at").meta["cost"].buffer_bytes == 0  # made at each call
    assert report.graph.node("fixed").meta["cost"].buffer_bytes == 4 * 4
    assert not dict(model.state_dict()) and report.params == 0


def test_the_module_follows_the_models_dtype(built):
    _, model = built
    wide = archspec.build_text(MASK).to(torch.float64)
    assert wide.query_at(torch.randn(1, 6, 8, dtype=torch.float64)).dtype == torch.float64
    assert model.query_at(torch.randn(1, 6, 8)).dtype == torch.float32


def test_a_symbolic_constant_mixes_the_tokens_under_generate(built):
    report, _ = built
    assert isinstance(decode_of(report.graph.node("query_at")), Mixes)
    assert decode_of(report.graph.node("fixed")) is NO_TOKENS


def test_exports_with_a_dynamic_length(built):
    report, model = built
    spec = dynamic_shapes(report.graph)
    assert (spec["x"][1].__name__, spec["x"][1].min, spec["x"][1].max) == ("L", 4, 64)  # a torch.export Dim
    program = export_program(model, report.graph)
    shape = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == "x").meta["val"].shape
    assert not isinstance(shape[1], int)  # symbolic in the program, not the traced length
    for batch, length in ((5, 9), (2, 31)):
        x = torch.randn(batch, length, 8)
        with torch.no_grad():
            for got, want in zip(program.module()(x), model(x), strict=True):
                assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)


def test_onnxruntime_runs_it_at_two_lengths(built, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    report, model = built
    path = str(tmp_path / "mask.onnx")
    result = export_onnx(model, report.graph, path)
    assert result.max_difference is not None and result.max_difference < 1e-4
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch, length in ((2, 6), (1, 40)):
        x = torch.randn(batch, length, 8)
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        for g, want in zip(got, reference(x), strict=True):
            assert g.shape == tuple(want.shape) and torch.allclose(torch.from_numpy(g), want, atol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_a_sized_constant(tmp_path, capsys):
    checks_tensorrt_coverage(MASK, tmp_path, capsys)


def test_the_standalone_model_py_gives_the_same(built, tmp_path):
    report, model = built
    again = standalone_copy(model, report.name, report.file, tmp_path)
    x = torch.randn(2, 7, 8)
    for got, want in zip(again(x), model(x), strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("node, message, hint", [
    ("{from: x, constant: {shape: [Q, L]}}", "unknown size 'Q' in the constant's shape", "(here: L)"),
    ("{from: x, constant: {shape: [B, L]}}", "a constant's batch is 1 (it broadcasts over the batch); B is not one "
                                             "of its sizes", None),
    ("{from: y, constant: {shape: [L, L]}}", "the constant's size L is taken at run time from the tensor it reads, "
                                             "and a token sequence [B, 6, 8] has no axis of size L", "`from: ...`"),
    ("{from: [x, y], constant: {shape: [L]}}", "constant reads 1 input(s) (like), this node gives 2", None),
    ("{from: x, constant: {shape: [L, 0]}}", "shape", None),
    ("{from: x, constant: {shape: [L], fill: eye}}", "an identity needs two axes, got shape [L]", None),
    ("{from: x, constant: {shape: [L, L], fill: index, along: 3}}",
     "axis 3 is not an axis of the constant [1, L, L] other than the batch", None),
])
def test_bad_sizes_are_located_errors(node, message, hint):
    text = f"name: bad\ndims:\n  L: [4, 16]\ninputs:\n  x: [B, L, 8]\n  y: [B, 6, 8]\ngraph:\n  - {node}\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert d.loc is not None and d.loc.line == 8
    if hint:
        assert hint in (d.hint or ""), d.hint
