"""Window attention with external queries (`queries: external`: GC ViT's global query, read as
an input, not normed or projected, shared by every window of its sample) against timm's
GlobalContextVitBlock (norm1, window partition, WindowAttentionGlobal, reverse, residual) with
perturbed weights; its parameter count and FLOPs; export with a dynamic batch, ONNX Runtime and
TensorRT coverage; and the located errors."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.backends.export import export_program
from archspec.core.errors import SpecError
from tests.conftest import checks_tensorrt_coverage

gcvit = pytest.importorskip("timm.models.gcvit")

DIM, HEADS, GRID, WINDOW = 32, 4, 8, 4

SPEC = f"""
name: gcvit_global_attention
inputs:
  x: {{shape: [B, {GRID * GRID}, {DIM}], grid: [{GRID}, {GRID}]}}
  q_global: [B, {WINDOW * WINDOW}, {DIM}]
graph:
  - {{id: attn, from: [x, q_global], attention: {{kind: window, window: {WINDOW}, heads: {HEADS}, queries: external}}}}
outputs: [attn]
"""


def pair():
    torch.manual_seed(0)
    ref = gcvit.GlobalContextVitBlock(DIM, (GRID, GRID), HEADS, window_size=WINDOW, use_global=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    model = archspec.build_text(SPEC).eval()
    model.load_state_dict({
        "attn.norm.weight": ref.norm1.weight, "attn.norm.bias": ref.norm1.bias,
        "attn.kv.weight": ref.attn.qkv.weight, "attn.kv.bias": ref.attn.qkv.bias,
        "attn.position_bias.table": ref.attn.rel_pos.relative_position_bias_table,
        "attn.proj.weight": ref.attn.proj.weight, "attn.proj.bias": ref.attn.proj.bias}, strict=True)
    return ref, model


def run_reference(ref, x, q_global):
    """The block's attention half: x + attn(norm1(x), q_global), on [B, H, W, C]."""
    B = x.shape[0]
    grid_x = x.view(B, GRID, GRID, DIM)
    with torch.no_grad():
        out = grid_x + ref._window_attn(ref.norm1(grid_x), q_global.view(B, WINDOW, WINDOW, DIM))
    return out.reshape(B, GRID * GRID, DIM)


def test_external_queries_equal_gcvits_global_window_attention():
    ref, model = pair()
    x, q_global = torch.randn(3, GRID * GRID, DIM), torch.randn(3, WINDOW * WINDOW, DIM)
    with torch.no_grad():
        ours = model(x, q_global)
    expected = run_reference(ref, x, q_global)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    other = torch.randn(3, WINDOW * WINDOW, DIM)
    with torch.no_grad():
        assert not torch.allclose(model(x, other), expected, atol=1e-3)  # the queries are read
    report = archspec.check_text(SPEC)
    assert report.params == sum(p.numel() for p in ref.parameters() if p is not None) - sum(
        p.numel() for p in (*ref.norm2.parameters(), *ref.mlp.parameters()))  # the block less its MLP half


def test_the_query_projection_is_not_counted():
    with_queries = archspec.check_text(SPEC)
    own = archspec.check_text(SPEC.replace("from: [x, q_global]", "from: x").replace(", queries: external", ""))
    tokens = GRID * GRID
    assert own.params - with_queries.params == DIM * DIM + DIM
    assert own.flops - with_queries.flops == 2 * tokens * DIM * DIM


@pytest.mark.slow  # the default tier exports these options together: test_attention_parts_round5.py
def test_it_exports_with_a_dynamic_batch_and_runs_in_onnx_runtime(tmp_path, capsys):
    from archspec.compiler.backends.onnx import export_onnx

    _, model = pair()
    report = archspec.check_text(SPEC)
    program = export_program(model, report.graph)
    for batch in (2, 5):
        x, q_global = torch.randn(batch, GRID * GRID, DIM), torch.randn(batch, WINDOW * WINDOW, DIM)
        with torch.no_grad():
            assert torch.allclose(program.module()(x, q_global), model(x, q_global), atol=1e-5)
    pytest.importorskip("onnxruntime")
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4
    checks_tensorrt_coverage(SPEC, tmp_path, capsys)


@pytest.mark.parametrize("old, new, words", [
    ("q_global: [B, 16, 32]", "q_global: [B, 9, 32]", "external queries must be one 4x4 window's tokens"),
    ("kind: window", "kind: shifted", "external queries go with unshifted windows"),
    ("queries: external", "queries: external, qkv_bias: qv", "external queries have no projection"),
])
def test_what_does_not_fit_is_refused(old, new, words):
    with pytest.raises(SpecError, match=words):
        archspec.check_text(SPEC.replace(old, new))
