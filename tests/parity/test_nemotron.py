"""Nemotron (Hugging Face's NemotronForCausalLM) in native words, as the user trial asked: its
LayerNorm1P (a LayerNorm scaled by 1 + w, w stored) is `norm_offset: 1` on the sub-layers and
`offset: 1` on the final norm, its squared-ReLU MLP is `act: relu2`, its partial rotary
`rope_dims`. The trial needed a mapping rule adding 1 to every norm weight (or 12 nodes a norm)
and 6 nodes an MLP; here the spec is 5 nodes and the mapping renames only.

Against the reference with every parameter perturbed by seeded noise: parameter counts
(reference, module, checker), logits, greedy tokens; the same weights without the offset give
other logits, so the comparison can fail."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """\
archspec: 1
name: nemotron
params: {vocab: 256, dim: 64, inner: 160, layers: 2, heads: 4, kv_heads: 2, rope_dims: 8, context: 128,
         eps: 1.0e-5, offset: 1.0}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
graph:
  - id: embed
    embed: {vocab: "${vocab}", dim: "${dim}", pos: none}
  - id: layers
    repeat: ${layers}
    graph:
      - id: attn
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: 10000.0,
                    rope_dims: "${rope_dims}", qkv_bias: false, proj_bias: false, norm_eps: "${eps}",
                    norm_offset: "${offset}"}
      - id: mlp
        mlp: {hidden: "${inner}", act: relu2, bias: false, norm_eps: "${eps}", norm_offset: "${offset}"}
  - id: norm
    norm: {eps: "${eps}", offset: "${offset}"}
  - id: head
    head: {kind: lm, vocab: "${vocab}"}
mappings: [hf_nemotron.yaml]
"""

MAPPING = r"""
archspec: 1
name: hf nemotron
identify: ['^model\.embed_tokens\.weight$', '^model\.layers\.0\.mlp\.up_proj\.weight$']
rules:
  - drop: ['rotary_emb\.inv_freq$', 'rotary_emb\.original_inv_freq$']
  - fuse:
      match: '^model\.layers\.(\d+)\.self_attn\.{part}\.weight$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - rename:
      '^model\.embed_tokens\.': embed.tokens.
      '^model\.layers\.(\d+)\.self_attn\.qkv\.': 'layers.\1.attn.qkv.'
      '^model\.layers\.(\d+)\.self_attn\.o_proj\.': 'layers.\1.attn.proj.'
      '^model\.layers\.(\d+)\.input_layernorm\.': 'layers.\1.attn.norm.'
      '^model\.layers\.(\d+)\.post_attention_layernorm\.': 'layers.\1.mlp.norm.'
      '^model\.layers\.(\d+)\.mlp\.up_proj\.': 'layers.\1.mlp.fc1.'
      '^model\.layers\.(\d+)\.mlp\.down_proj\.': 'layers.\1.mlp.fc2.'
      '^model\.norm\.': norm.
      '^lm_head\.': head.fc.
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nemotron")
    (folder / "nemotron.yaml").write_text(SPEC)
    (folder / "hf_nemotron.yaml").write_text(MAPPING)
    config = transformers.NemotronConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, partial_rotary_factor=0.5,
                                         max_position_embeddings=128)
    torch.manual_seed(0)
    ref = transformers.NemotronForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.02, norm_scale=0.3)
    torch.save(ref.state_dict(), folder / "ref.pt")
    ours = archspec.build(str(folder / "nemotron.yaml"), weights=str(folder / "ref.pt")).eval()
    return ref, ours, folder


def test_nemotron_in_native_words_equals_hugging_face(pair):
    ref, ours, folder = pair
    count = sum(p.numel() for p in ref.parameters())
    assert sum(p.numel() for p in ours.parameters()) == count == archspec.check(str(folder / "nemotron.yaml")).params
    ids = torch.randint(0, 256, (2, 21), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (ref(ids).logits - ours(ids)).abs().max() < 1e-5
        theirs = ref.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert torch.equal(ours.generate(ids, max_new_tokens=12, compile=False), theirs)
    # the checkpoint holds w, as HF's: the module's norm weight is the file's, not 1 + w
    assert torch.equal(ours.state_dict()["norm.weight"], ref.state_dict()["model.norm.weight"])


def test_without_the_offset_the_logits_differ(pair):
    ref, _, folder = pair
    plain = archspec.build(str(folder / "nemotron.yaml"), {"offset": 0.0}, weights=str(folder / "ref.pt")).eval()
    ids = torch.randint(0, 256, (2, 21), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (ref(ids).logits - plain(ids)).abs().max() > 1e-2


def test_a_fresh_offset_norm_starts_as_a_plain_layer_norm():
    model = archspec.build_text(SPEC.replace("mappings: [hf_nemotron.yaml]\n", ""))
    assert torch.equal(model.state_dict()["norm.weight"], torch.zeros(64))  # scale offset + 0 = 1
