"""The mask part local_window: ModernBERT's bidirectional local attention (query i sees keys j with
|i - j| <= window // 2) on global attention, against SDPA over hand-made tensors, with a padding
mask, exported with a dynamic batch and length and run in ONNX Runtime; it stays one fused SDPA;
it is refused where the kind does not take mask parts, and by generate."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.export import export_program
from archspec.core.errors import SpecError

DIM, HEADS, WINDOW = 32, 4, 6

LOCAL = f"""
name: local
dims: {{L: [1, 64]}}
inputs:
  x: [B, L, {DIM}]
  mask: {{shape: [B, L], dtype: int64}}
graph:
  - id: attn
    from: [x, mask]
    attention: {{kind: global, heads: {HEADS}, norm: none, residual: false, padding_mask: true,
                scores: [{{local_window: {{window: {WINDOW}}}}}]}}
outputs: [attn]
"""


def model_and_reference():
    torch.manual_seed(0)
    model = archspec.build_text(LOCAL).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def by_hand(model, x, keep):
    attn = model.attn
    B, N, _ = x.shape
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).split(DIM, dim=-1)
    q, k, v = (t.reshape(B, N, HEADS, DIM // HEADS).transpose(1, 2) for t in (q, k, v))
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    seen = ((i - j).abs() <= WINDOW // 2)[None, None] & (keep[:, None, None, :] == 1)  # [B, 1, N, N]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=seen).transpose(1, 2).reshape(B, N, DIM)
    return F.linear(out, attn.proj.weight, attn.proj.bias)


def inputs(batch: int, length: int):
    x = torch.randn(batch, length, DIM)
    keep = torch.ones(batch, length, dtype=torch.long)
    keep[0, -3:] = 0  # the first row padded at the end
    return x, keep


def test_a_bidirectional_window_on_global_attention_equals_sdpa_by_hand():
    model = model_and_reference()
    for shape in ((2, 11), (3, 20)):
        x, keep = inputs(*shape)
        with torch.no_grad():
            assert torch.allclose(model(x, keep), by_hand(model, x, keep), atol=1e-5)
        plain = archspec.build_text(LOCAL.replace(f"scores: [{{local_window: {{window: {WINDOW}}}}}]", "scores: []")).eval()
        plain.load_state_dict(model.state_dict())
        with torch.no_grad():
            assert not torch.allclose(plain(x, keep), model(x, keep), atol=1e-3)  # the window hides keys
    assert not model.attn.mixes_scores()  # a mask: one fused SDPA


def test_the_window_exports_with_a_dynamic_batch_and_length_and_runs_in_onnx_runtime(tmp_path):
    from archspec.compiler.backends.onnx import export_onnx

    report, model = archspec.check_text(LOCAL), model_and_reference()
    program = export_program(model, report.graph)
    for shape in ((3, 9), (1, 25)):
        x, keep = inputs(*shape)
        with torch.no_grad():
            assert torch.allclose(program.module()(x, keep), model(x, keep), atol=1e-5)
    pytest.importorskip("onnxruntime")
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4


def test_a_kind_without_mask_parts_refuses_it():
    text = ("name: w\ninputs:\n  x: {shape: [B, 64, 32], grid: [8, 8]}\ngraph:\n"
            "  - {attention: {kind: window, window: 4, heads: 4, scores: [{local_window: {window: 4}}]}}\n")
    with pytest.raises(SpecError, match="does not take mask parts|takes score parts that add a bias"):
        archspec.check_text(text)


def test_generate_refuses_it_in_words():
    from archspec.primitives.kv_cache import refusal

    lm = ("name: lm\ndims: {L: [1, 32]}\ninputs:\n  ids: {shape: [B, L], dtype: int64}\ngraph:\n"
          "  - {embed: {vocab: 50, dim: 32, max_len: 32}}\n"
          "  - {id: attn, attention: {kind: causal, heads: 4, scores: [{local_window: {window: 4}}]}}\n"
          "  - {head: {kind: lm, vocab: 50}}\n")
    node, why = refusal(archspec.check_text(lm).graph)
    assert node == "attn" and why.startswith("its score part local_window: ") and "kind: sliding" in why
