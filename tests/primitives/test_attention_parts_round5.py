"""The attention options and parts of issue 36's trials together in one spec, through the
targets: window attention with external queries, dim_major head merging, a score-bias param and
the offset table; padded windows with the norm after the padding; global attention with dim_major
merging and the offset table; DeBERTa's disentangled terms. Exported with a dynamic batch (equal
to eager at two batch sizes), every op converts in TensorRT (nothing falls back), the standalone
model.py gives the same, and ONNX Runtime agrees (slow tier). Each option is checked against its
reference in its own file (test_external_queries.py, test_merge_heads.py,
test_window_pad_order.py, test_window_score_bias.py, test_disentangled.py)."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.backends.export import export_program
from tests.conftest import checks_tensorrt_coverage, standalone_copy

SPEC = """
name: attention_parts
inputs:
  x: {shape: [B, 64, 32], grid: [8, 8]}
  q_global: [B, 16, 32]
graph:
  - {id: window_bias, param: {shape: [4, 16, 16]}}
  - id: gc
    from: [x, q_global, window_bias]
    attention: {kind: window, window: 4, heads: 4, queries: external, merge_heads: dim_major, score_bias: true,
                scores: [offset_table]}
  - {id: tiny, from: gc, attention: {kind: window, window: 3, heads: 4, pad: before_norm, bias: none,
                                     scores: [offset_table]}}
  - {id: nest, from: tiny, attention: {kind: global, heads: 4, merge_heads: dim_major, scores: [offset_table]}}
  - {id: rel, param: {shape: [16, 32]}}
  - id: deberta
    from: [nest, rel]
    attention: {kind: global, heads: 4, norm: post, scale: 0.2041241452319315,
                scores: [{disentangled: {embeddings: rel, buckets: 8, max_position: 32}}]}
outputs: [deberta]
"""


def built():
    from tests.conftest import perturb_constants

    torch.manual_seed(0)
    model = perturb_constants(archspec.build_text(SPEC)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # the tables and the bias start at zeros
    return model


def test_the_parts_export_with_a_dynamic_batch_and_convert_in_tensorrt(tmp_path, capsys):
    model, report = built(), archspec.check_text(SPEC)
    program = export_program(model, report.graph)
    for batch in (2, 5):
        x, q_global = torch.randn(batch, 64, 32), torch.randn(batch, 16, 32)
        with torch.no_grad():
            assert torch.allclose(program.module()(x, q_global), model(x, q_global), atol=1e-5)
    checks_tensorrt_coverage(SPEC, tmp_path, capsys)


def test_the_standalone_model_py_gives_the_same(tmp_path):
    model, report = built(), archspec.check_text(SPEC)
    again = standalone_copy(model, report.name, report.file, tmp_path)
    again.load_state_dict(model.state_dict())
    x, q_global = torch.randn(2, 64, 32), torch.randn(2, 16, 32)
    with torch.no_grad():
        assert torch.equal(again(x, q_global), model(x, q_global))


@pytest.mark.slow  # ONNX export is the slowest third of these checks
def test_the_parts_run_in_onnx_runtime(tmp_path):
    from archspec.compiler.backends.onnx import export_onnx

    pytest.importorskip("onnxruntime")
    model, report = built(), archspec.check_text(SPEC)
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4
