"""Falcon's ALiBi (Hugging Face's FalconForCausalLM with alibi=True): the biases join q·k^T before
the 1/sqrt(head_dim) scaling, so they are scaled with the scores, where BLOOM's and MPT's are
added after it. The Falcon trial wrote a 13-step `mod` score part for it; `alibi_at:
before_scale` on `kind: alibi` says it.

Against FalconForCausalLM (the old form: parallel attention, multi-query, one norm; SDPA, Hugging
Face's default: its eager path adds the biases twice) at a tiny config, every parameter perturbed
by seeded noise: parameter counts, logits, greedy tokens against its generate (ours decodes with
the cache). The slopes of 4 and 6 heads are powers of two, so Hugging Face's bf16 rounding of them
changes nothing. Without `alibi_at` the logits differ, so the comparison can fail."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """\
archspec: 1
name: falcon_alibi_tiny
params: {vocab: 100, dim: 48, layers: 2, heads: 4, context: 64, at: before_scale}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
blocks:
  layer:                         # x + attn(ln x) + mlp(ln x)
    inputs: [x]
    graph:
      - {id: ln, from: x, norm: {}}
      - {id: attn, from: ln, attention: {kind: alibi, heads: "${heads}", kv_heads: 1, alibi_at: "${at}",
                                         norm: none, residual: false}}
      - {id: mlp, from: ln, mlp: {ratio: 4, act: gelu, norm: none, residual: false}}
      - {id: out, from: [x, attn, mlp], add: {}}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - {id: h, repeat: "${layers}", layer: {}}
  - {id: ln_f, norm: {}}
  - {id: head, head: {kind: lm, vocab: "${vocab}"}}
"""


def to_ours(state: dict, heads: int, dim: int) -> dict:
    """Hugging Face's names and its multi-query query_key_value [q_all; k; v] as ours."""
    out = {}
    for key, value in state.items():
        key = key.removeprefix("transformer.")
        if "query_key_value" in key:
            q, k, v = value.split([dim, dim // heads, dim // heads])
            value = torch.cat([q, k, v])  # [q; k; v] rows: our qkv's order
        out[(key.replace("word_embeddings", "embed.tokens").replace("self_attention.query_key_value", "attn.qkv")
             .replace("self_attention.dense", "attn.proj").replace("input_layernorm", "ln")
             .replace("dense_h_to_4h", "fc1").replace("dense_4h_to_h", "fc2").replace("lm_head", "head.fc"))] = value
    return out


@pytest.mark.parametrize("heads", [4, 6])
def test_falcons_alibi_as_hugging_faces(heads):
    from transformers import FalconConfig, FalconForCausalLM

    dim = 8 * heads
    config = FalconConfig(vocab_size=100, hidden_size=dim, num_hidden_layers=2, num_attention_heads=heads,
                          alibi=True, new_decoder_architecture=False, multi_query=True, parallel_attn=True,
                          bias=True, tie_word_embeddings=False, max_position_embeddings=64,
                          attn_implementation="sdpa", bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    ref = FalconForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.3)
    overrides = {"dim": dim, "heads": heads}
    model = archspec.build_text(SPEC, overrides).eval()
    model.load_state_dict(to_ours(ref.state_dict(), heads, dim))
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    ids = torch.randint(0, 100, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs = ref(ids).logits
        assert (model(ids) - theirs).abs().max() < 1e-4 * max(1.0, float(theirs.abs().max()))
        after = archspec.build_text(SPEC, {**overrides, "at": "after_scale"}).eval()
        after.load_state_dict(model.state_dict())
        assert (after(ids) - theirs).abs().max() > 1e-2  # BLOOM's place is another model
    expected = ref.generate(ids[:1, :5], attention_mask=torch.ones(1, 5, dtype=torch.long), max_new_tokens=10,
                            do_sample=False)
    assert torch.equal(model.generate(ids[:1, :5], max_new_tokens=10), expected)
