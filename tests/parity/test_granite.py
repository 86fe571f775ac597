"""IBM Granite (Hugging Face's GraniteForCausalLM): Llama with four fixed multipliers, in native
words: `embed: {multiplier}` (embedding_multiplier), the sub-layers' `branch_scale`
(residual_multiplier), attention's `scale` (attention_multiplier) and the lm head's
`logits_divisor` (logits_scaling). The Granite user trial wrote them as scale nodes (2 + 4 a
layer), exact; now they are options of the nodes that hold them.

Against GraniteForCausalLM at a tiny config (every parameter perturbed by seeded noise, loaded
through the shipped hf_llama mapping: Granite keeps Llama's names): parameter counts, logits, greedy tokens against its generate and
generate(compile=True) is not asked (the compiled step is the eager one's graph); leaving any one
multiplier out gives other logits, so the comparison can fail.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

MULTIPLIERS = {"embedding": 12.0, "residual": 0.22, "attention": 0.0156, "logits": 8.0}

SPEC = """\
archspec: 1
name: granite_tiny
params: {vocab: 256, dim: 64, hidden: 128, layers: 2, heads: 4, kv_heads: 2, context: 64, eps: 1.0e-6,
         embedding: 12.0, residual: 0.22, attention: 0.0156, logits: 8.0}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none, multiplier: "${embedding}"}}
  - id: layers
    repeat: ${layers}
    graph:
      - id: attn
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: 10000.0, qkv_bias: false,
                    proj_bias: false, norm_kind: rms, norm_eps: "${eps}", scale: "${attention}",
                    branch_scale: "${residual}"}
      - id: mlp
        mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: "${eps}",
              branch_scale: "${residual}"}
  - {id: norm, norm: {kind: rms, eps: "${eps}"}}
  - {id: head, head: {kind: lm, vocab: "${vocab}", logits_divisor: "${logits}"}}
mappings: [hf_llama]  # the shipped mapping, by name: Llama's names
"""

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import GraniteConfig, GraniteForCausalLM

    config = GraniteConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                           embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0156,
                           logits_scaling=8.0, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(0)
    ref = GraniteForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.05)
    folder = tmp_path_factory.mktemp("granite")
    (folder / "granite.yaml").write_text(SPEC)
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


def ours(pair, **overrides):
    ref, folder = pair
    return archspec.build(str(folder / "granite.yaml"), overrides, weights=str(folder / "ref.pt")).eval()


IDS = torch.randint(0, 256, (3, 11), generator=torch.Generator().manual_seed(2))


def test_counts_and_logits_as_hugging_faces(pair):
    ref, _ = pair
    model = ours(pair)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    with torch.no_grad():
        theirs, mine = ref(IDS).logits, model(IDS)
    assert (theirs - mine).abs().max() < 1e-5 * max(1.0, theirs.abs().max())


def test_greedy_tokens_as_hugging_faces_generate(pair):
    ref, _ = pair
    theirs = ref.generate(IDS[:, :4], attention_mask=torch.ones(3, 4, dtype=torch.long), max_new_tokens=10,
                          do_sample=False)
    assert torch.equal(ours(pair).generate(IDS[:, :4], max_new_tokens=10), theirs)


@pytest.mark.parametrize("name", list(MULTIPLIERS))
def test_each_multiplier_matters(pair, name):
    ref, _ = pair
    default = 1.0 if name != "attention" else None  # attention: 1/sqrt(head_dim) without it
    with torch.no_grad():
        gap = (ours(pair, **{name: default})(IDS) - ref(IDS).logits).abs().max()
    assert gap > 1e-4, name  # the match above is within 1e-5 of the largest logit (about 3e-7 here)
