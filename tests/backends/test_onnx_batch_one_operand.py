"""Attention written from tensor ops whose queries are a learned param (batch 1) and whose keys
are the tokens (batch B): its einsum broadcast the batch, and the ONNX file failed in ONNX
Runtime (a Reshape of the matmul's input), a build that stopped with "a bug in archspec" (the
Perceiver trial). The einsum now expands the batch-1 operand; eager, export and ONNX Runtime
agree, at batches other than the one traced."""

from __future__ import annotations

import pytest

import archspec
from archspec.compiler.backends.onnx import write_model_onnx

SPEC = """
name: param_queries
inputs:
  x: [B, 4, 8]
graph:
  - {id: p, param: {shape: [2, 8]}}
  - {id: q, from: p, linear: {dim: 8}}
  - {id: qh, rearrange: {pattern: "b n (h d) -> b h n d", sizes: {h: 2}}}
  - {id: k, from: x, linear: {dim: 8}}
  - {id: kh, rearrange: {pattern: "b n (h d) -> b h n d", sizes: {h: 2}}}
  - {id: s, from: [qh, kh], einsum: {eq: "b h i d, b h j d -> b h i j"}}
  - {id: ctx, from: [s, kh], einsum: {eq: "b h i j, b h j d -> b h i d"}}
  - {id: merged, rearrange: {pattern: "b h n d -> b n (h d)", as: tokens}}
  - {id: proj, linear: {dim: 8}}
"""


@pytest.mark.parametrize("variant", ["optimized", "plain"])
def test_param_queries_over_a_batch_export_to_onnx_runtime(tmp_path, variant):
    pytest.importorskip("onnxruntime")
    report = archspec.check_text(SPEC)
    model = archspec.build_text(SPEC, seed=0).eval()
    result = write_model_onnx(model, report.graph, str(tmp_path / "model.onnx"), variant=variant)
    assert result.max_difference is not None and result.max_difference < 1e-5

