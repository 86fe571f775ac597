"""Cross attention whose memory is narrower than its queries (Perceiver's latents over narrower
inputs): `kdim` declares the memory's width, the keys and values are projected from it; against
torch's nn.MultiheadAttention(kdim=, vdim=) with perturbed weights, its parameter count, FLOPs
with the projections from the memory's width, exported with a dynamic batch and memory length,
and in ONNX Runtime."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.backends.export import export_program
from archspec.core.errors import SpecError

DIM, MEMORY, HEADS, LATENTS = 128, 96, 4, 16

PERCEIVER = f"""
name: perceiver_cross
dims: {{M: [1, 256]}}
inputs:
  latents: [B, {LATENTS}, {DIM}]
  memory: [B, M, {MEMORY}]
graph:
  - id: attn
    from: [latents, memory]
    attention: {{kind: cross, heads: {HEADS}, kdim: {MEMORY}, norm: none, residual: false}}
outputs: [attn]
"""


def pair():
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(DIM, HEADS, kdim=MEMORY, vdim=MEMORY, batch_first=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    model = archspec.build_text(PERCEIVER).eval()
    bias = ref.in_proj_bias
    model.load_state_dict({
        "attn.q.weight": ref.q_proj_weight, "attn.q.bias": bias[:DIM],
        "attn.kv.weight": torch.cat([ref.k_proj_weight, ref.v_proj_weight]), "attn.kv.bias": bias[DIM:],
        "attn.proj.weight": ref.out_proj.weight, "attn.proj.bias": ref.out_proj.bias}, strict=True)
    return ref, model


def test_a_narrower_memory_with_kdim_equals_multihead_attention():
    ref, model = pair()
    for length in (50, 7):
        x, memory = torch.randn(2, LATENTS, DIM), torch.randn(2, length, MEMORY)
        with torch.no_grad():
            assert torch.allclose(model(x, memory), ref(x, memory, memory, need_weights=False)[0], atol=1e-5)
    report = archspec.check_text(PERCEIVER)
    assert report.params == sum(p.numel() for p in ref.parameters())
    keys = 256  # the longest memory, as check counts
    projections = 2 * LATENTS * DIM * DIM * 2 + 2 * keys * MEMORY * 2 * DIM  # q and proj; k and v from the memory
    products = 2 * 2 * LATENTS * keys * DIM  # q·k^T and the weights times v
    assert report.flops == projections + products


def test_it_exports_with_a_dynamic_batch_and_memory_and_runs_in_onnx_runtime(tmp_path):
    from archspec.compiler.backends.onnx import export_onnx

    _, model = pair()
    report = archspec.check_text(PERCEIVER)
    program = export_program(model, report.graph)
    for batch, length in ((3, 40), (1, 9)):
        x, memory = torch.randn(batch, LATENTS, DIM), torch.randn(batch, length, MEMORY)
        with torch.no_grad():
            assert torch.allclose(program.module()(x, memory), model(x, memory), atol=1e-5)
    pytest.importorskip("onnxruntime")
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4


@pytest.mark.parametrize("option, words", [
    ("", "memory width 96 differs from the query width 128"),
    ("kdim: 64, ", "memory width 96 differs from kdim 64"),
    ("kdim: 96, vdim: 64, ", "kdim 96 and vdim 64 differ"),
])
def test_a_width_that_is_not_declared_is_refused(option, words):
    text = PERCEIVER.replace(f"kdim: {MEMORY}, ", option)
    with pytest.raises(SpecError, match=words):
        archspec.check_text(text)
