"""A Gemma 2 decoder written in the spec language (sandwich RMSNorms with (1 + w), GeGLU, the
embedding times sqrt(dim), alternating sliding and full causal layers with soft-capped scores
(`scores: [softcap]`), tied logits with Gemma 2's final soft-cap, the lm head's `logits_softcap`)
against Hugging Face's Gemma2ForCausalLM at a tiny config with perturbed weights: logits within
1e-5 over a prompt longer than the window, and greedy generate() token for token as Hugging
Face's at batch 1 and on a left-padded batch (eager and compiled)."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.generate import generate

from tests.generate.test_generate import left_padded, one_thread  # noqa: F401
from tests.parity.test_vocabulary import perturb_everything

VOCAB, DIM, HEADS, KV_HEADS, HEAD_DIM, WINDOW, CAP, FINAL_CAP = 500, 64, 4, 2, 16, 4, 2.0, 3.0

GEMMA2 = f"""
name: gemma2_tiny
dims: {{L: [1, 128]}}
inputs:
  ids: {{shape: [B, L], dtype: int64}}
graph:
  - {{id: embed, embed: {{vocab: {VOCAB}, dim: {DIM}, pos: none}}}}
  - {{id: scaled, scale: {{factor: {DIM ** 0.5}}}}}
  - id: layers
    repeat: 1
    graph:
      - id: local
        attention: {{kind: sliding, window: {WINDOW}, heads: {HEADS}, kv_heads: {KV_HEADS}, head_dim: {HEAD_DIM},
                    scale: {HEAD_DIM ** -0.5}, rope_theta: 10000.0, qkv_bias: false, proj_bias: false,
                    norm: sandwich, norm_kind: rms, norm_offset: 1.0, norm_eps: 1.0e-6,
                    scores: [{{softcap: {{cap: {CAP}}}}}]}}
      - id: local_mlp
        mlp: {{hidden: 96, act: gelu_tanh, gated: true, bias: false, norm: sandwich, norm_kind: rms,
              norm_offset: 1.0, norm_eps: 1.0e-6}}
      - id: full
        attention: {{kind: causal, heads: {HEADS}, kv_heads: {KV_HEADS}, head_dim: {HEAD_DIM},
                    scale: {HEAD_DIM ** -0.5}, rope_theta: 10000.0, qkv_bias: false, proj_bias: false,
                    norm: sandwich, norm_kind: rms, norm_offset: 1.0, norm_eps: 1.0e-6,
                    scores: [{{softcap: {{cap: {CAP}}}}}]}}
      - id: full_mlp
        mlp: {{hidden: 96, act: gelu_tanh, gated: true, bias: false, norm: sandwich, norm_kind: rms,
              norm_offset: 1.0, norm_eps: 1.0e-6}}
  - {{id: norm, norm: {{kind: rms, offset: 1.0, eps: 1.0e-6}}}}
  - {{id: logits, head: {{kind: lm, tie: embed, logits_softcap: {FINAL_CAP}}}}}
outputs: [logits]
"""


def reference():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(vocab_size=VOCAB, hidden_size=DIM, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                          query_pre_attn_scalar=HEAD_DIM, sliding_window=WINDOW, attn_logit_softcapping=CAP,
                          final_logit_softcapping=FINAL_CAP, max_position_embeddings=128,
                          bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return Gemma2ForCausalLM._from_config(config, attn_implementation="eager")


def weights(ref) -> dict:
    """Hugging Face's names -> ours: q, k, v fused into qkv; gate and up into fc1 (gate first)."""
    sd, out = ref.state_dict(), {"embed.tokens.weight": ref.state_dict()["model.embed_tokens.weight"],
                                 "norm.weight": ref.state_dict()["model.norm.weight"]}
    for i, (attn, mlp) in enumerate((("local", "local_mlp"), ("full", "full_mlp"))):
        p = f"model.layers.{i}."
        q, k, v = (sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv")
        out |= {f"layers.0.{attn}.qkv.weight": torch.cat([q, k, v]),
                f"layers.0.{attn}.proj.weight": sd[p + "self_attn.o_proj.weight"],
                f"layers.0.{attn}.norm.weight": sd[p + "input_layernorm.weight"],
                f"layers.0.{attn}.post_norm.weight": sd[p + "post_attention_layernorm.weight"],
                f"layers.0.{mlp}.fc1.weight": torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]]),
                f"layers.0.{mlp}.fc2.weight": sd[p + "mlp.down_proj.weight"],
                f"layers.0.{mlp}.norm.weight": sd[p + "pre_feedforward_layernorm.weight"],
                f"layers.0.{mlp}.post_norm.weight": sd[p + "post_feedforward_layernorm.weight"]}
    return out


@pytest.fixture(scope="module")
def pair():
    pytest.importorskip("transformers.models.gemma2")
    torch.manual_seed(0)
    ref = perturb_everything(reference().eval())
    with torch.no_grad():  # large scores, so the soft-cap bites
        for layer in ref.model.layers:
            for name in ("q_proj", "k_proj"):
                getattr(layer.self_attn, name).weight.mul_(4)
    ours = archspec.build_text(GEMMA2).eval()
    missing, unexpected = ours.load_state_dict(weights(ref), strict=False)
    assert not unexpected and all(name.startswith("logits.") for name in missing), (missing, unexpected)
    return ref, ours


def test_logits_equal_hugging_faces(pair):
    ref, ours = pair
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(5))  # longer than the window
    with torch.no_grad():
        expected = ref(ids).logits
        got = ours(ids)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5), (got - expected).abs().max()
    assert archspec.check_text(GEMMA2).params == sum(p.numel() for p in ref.parameters())
    uncapped = archspec.build_text(GEMMA2.replace(f", logits_softcap: {FINAL_CAP}", "")).eval()
    uncapped.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert (uncapped(ids) - expected).abs().max() > 0.1  # the cap matters: the comparison can fail


def test_greedy_equals_hugging_faces_at_batch_1_and_on_a_left_padded_batch(pair):
    ref, ours = pair
    ids = torch.randint(1, VOCAB, (1, 7), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False,
                                pad_token_id=0)
    assert torch.equal(generate(ours, ids, max_new_tokens=20), expected)
    ids, mask = left_padded()
    with torch.no_grad():
        expected = ref.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=0)
    out = generate(ours, ids, max_new_tokens=20, attention_mask=mask)
    assert torch.equal(out, expected)
    assert torch.equal(generate(ours, ids, max_new_tokens=20, attention_mask=mask, compile=True), out)
