"""The score part `sinks` (GPT-OSS's attention sinks: a learned logit per head in each query's
softmax denominator) against Hugging Face's GptOssAttention with perturbed weights: grouped-query
attention, rotary positions, a sliding window and full causal attention, fp32, within 1e-5; its
parameter count, its export with a dynamic batch and length, and its generation with a cache."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.generate import generate

from tests.conftest import standalone_copy

DIM, HEADS, KV_HEADS, HEAD_DIM, WINDOW, THETA = 64, 8, 2, 16, 4, 10000.0


def spec(kind: str, length: str = "12") -> str:
    window = f"window: {WINDOW}, " if kind == "sliding" else ""
    return (f"name: sink_attention\ndims: {{L: [1, 64]}}\ninputs:\n  x: [B, {length}, {DIM}]\ngraph:\n"
            f"  - {{id: attn, from: x, attention: {{kind: {kind}, {window}heads: {HEADS}, kv_heads: {KV_HEADS}, "
            f"head_dim: {HEAD_DIM}, rope_theta: {THETA}, norm: none, residual: false, scores: [sinks]}}}}\n"
            "outputs: [attn]\n")


def reference(kind: str):
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    config = GptOssConfig(hidden_size=DIM, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                          sliding_window=WINDOW, num_hidden_layers=1, attention_bias=True,
                          layer_types=["sliding_attention" if kind == "sliding" else "full_attention"])
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = GptOssAttention(config, 0).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        ref.sinks.mul_(5)  # sinks that take a visible share of the softmax
    return ref


def weights_of(ref) -> dict:
    """Hugging Face's names -> ours: q, k, v rows fused into qkv, o_proj the output, `sinks` the part's."""
    return {"attn.qkv.weight": torch.cat([ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight]),
            "attn.qkv.bias": torch.cat([ref.q_proj.bias, ref.k_proj.bias, ref.v_proj.bias]),
            "attn.proj.weight": ref.o_proj.weight, "attn.proj.bias": ref.o_proj.bias,
            "attn.sinks.sinks": ref.sinks}


def run_reference(ref, x, kind: str):
    L = x.shape[1]
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    angles = torch.arange(L).float()[:, None] * inv_freq[None, :]  # [L, d/2]
    position = (angles.cos()[None], angles.sin()[None])  # GptOss rotates the halves with [B, L, d/2] tables
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    hidden = (j > i) | ((j <= i - WINDOW) if kind == "sliding" else torch.zeros(L, L, dtype=torch.bool))
    mask = torch.zeros(L, L).masked_fill(hidden, torch.finfo(torch.float32).min)[None, None]
    with torch.no_grad():
        return ref(x, position, mask)[0]


@pytest.mark.parametrize("kind", ["sliding", "causal"])
def test_sinks_equal_gpt_oss_attention(kind):
    ref = reference(kind)
    model = archspec.build_text(spec(kind)).eval()
    model.load_state_dict(weights_of(ref), strict=True)
    x = torch.randn(2, 12, DIM)
    with torch.no_grad():
        ours = model(x)
    expected = run_reference(ref, x, kind)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    without = archspec.build_text(spec(kind).replace(", scores: [sinks]", "")).eval()
    without.load_state_dict({k: v for k, v in weights_of(ref).items() if "sinks" not in k})
    with torch.no_grad():
        assert not torch.allclose(without(x), expected, atol=1e-3)  # the sinks matter at these weights
    params = archspec.check_text(spec(kind)).params
    assert params == sum(p.numel() for p in ref.parameters()) == sum(p.numel() for p in model.parameters())


def test_sinks_export_with_a_dynamic_batch_and_length():
    text = spec("sliding", "L")
    report = archspec.check_text(text)
    model = archspec.build_text(text).eval()
    model.load_state_dict(weights_of(reference("sliding")))
    program = export_program(model, report.graph)
    for shape in ((3, 9), (1, 20)):
        x = torch.randn(*shape, DIM)
        with torch.no_grad():
            assert torch.allclose(program.module()(x), model(x), atol=1e-5)


LM = """
name: sink_lm
dims: {L: [1, 64]}
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 100, dim: 64, pos: none}}
  - {id: local, attention: {kind: sliding, window: 4, heads: 8, kv_heads: 2, rope_theta: 10000.0, scores: [sinks]}}
  - {id: full, attention: {kind: causal, heads: 8, kv_heads: 2, rope_theta: 10000.0, scores: [sinks]}}
  - {id: mlp, mlp: {ratio: 2}}
  - {id: head, head: {kind: lm, vocab: 100}}
outputs: [head]
"""


def test_sinks_generate_as_forward_without_a_cache():
    from tests.generate.test_generate import uncached_greedy
    from tests.parity.test_vocabulary import perturb_everything

    torch.manual_seed(0)
    model = perturb_everything(archspec.build_text(LM)).eval()
    with torch.no_grad():
        for name in ("local", "full"):
            getattr(model, name).sinks.sinks.copy_(torch.randn(8) * 3)
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(1))
    out = generate(model, ids, max_new_tokens=16)  # past the window: the sliding layer's ring
    assert torch.equal(out, uncached_greedy(model, ids, 16))
    assert torch.equal(generate(model, ids, max_new_tokens=16, compile=True), out)


def test_the_standalone_model_py_gives_the_same(tmp_path):
    text = spec("sliding", "L")
    report, model = archspec.check_text(text), archspec.build_text(text).eval()
    model.load_state_dict(weights_of(reference("sliding")))
    again = standalone_copy(model, report.name, report.file, tmp_path)
    again.load_state_dict(model.state_dict())
    x = torch.randn(2, 9, DIM)
    with torch.no_grad():
        assert torch.equal(again(x), model(x))


@pytest.mark.parametrize("kind", ["sliding", "causal"])
def test_sinks_run_as_one_sdpa_call_equal_to_the_written_out_form(kind, monkeypatch):
    """Sinks alone stay fused: one SDPA call with a zero key and value per sink (kernel.py `sunk`),
    equal to the written-out softmax with the sinks' column (`written_out`), with padded keys and a
    score bias too."""
    import torch.nn.functional as F

    model = archspec.build_text(spec(kind)).eval()
    model.load_state_dict(weights_of(reference(kind)))
    attn = model.get_submodule("attn")
    calls, sdpa = [], F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    x = torch.randn(2, 12, DIM)
    with torch.no_grad():
        model(x)
    assert len(calls) == 1
    generator = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, HEADS, 12, HEAD_DIM, generator=generator) for _ in range(3))
    padding = torch.ones(2, 12, dtype=torch.long)
    padding[1, :3] = 0  # a left-padded row
    bias = torch.randn(2, HEADS, 12, 12, generator=generator)
    with torch.no_grad():
        for b, pad in ((None, None), (bias, padding)):
            parts = attn.parts()
            fused, written = attn.kernel.sunk(q, k, v, b, pad, parts), attn.kernel.written_out(q, k, v, b, pad, parts)
            assert torch.allclose(fused, written, atol=1e-5, rtol=1e-5), (fused - written).abs().max()
