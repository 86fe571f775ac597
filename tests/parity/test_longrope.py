"""LongRoPE (Hugging Face's rope_type longrope: Phi-3, Phi-3.5, Phi-4-mini), as the Phi-3 user trial
asked: `rope_short_factors` and `rope_long_factors` divide each rotary frequency, the long ones in
a call whose furthest position is beyond `rope_original_length`, and cos and sin are scaled by
`rope_attention_factor`. The trial wrote it as 67 nodes of tables and the attention as 33 tensor
ops a layer: no fused kernel, no cache, no generate.

generate as Hugging Face's: Phi-3's prepare_inputs_for_generation drops the cache when the
sequence first passes the original length, so every key is rotated again with the long factors
(Decoder.refills); eager, compiled (the compiled step after the refill) and beam search.

Against Phi3ForCausalLM with every parameter perturbed by seeded noise: counts, logits within and
beyond the original length (full and partial rotary), greedy tokens across the switch (a
left-padded batch too), beam search, compile=True; the same weights with the short factors for
both give other logits beyond the switch only, so the comparison can fail; wrong factor lists are
located errors."""

from __future__ import annotations

import math

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

ORIGINAL, CONTEXT = 16, 64
SHORT = [1.0, 1.05, 1.1, 1.2, 1.3, 1.45, 1.6, 1.8]
LONG = [1.0, 1.3, 1.7, 2.2, 2.9, 3.8, 5.0, 6.5]
FACTOR = math.sqrt(1 + math.log(CONTEXT / ORIGINAL) / math.log(ORIGINAL))  # Hugging Face's default

SPEC = f"""\
archspec: 1
name: phi3
params:
  vocab: 256
  dim: 64
  heads: 4
  rotary: 1.0
  rope_dims: ${{int(dim // heads * rotary)}}
  short: {SHORT}
  long: {LONG}
dims:
  L: [1, {CONTEXT}]
inputs:
  input_ids: {{shape: [B, L], dtype: int64}}
graph:
  - id: embed
    embed: {{vocab: "${{vocab}}", dim: "${{dim}}", pos: none}}
  - id: layers
    repeat: 2
    graph:
      - id: attn
        attention: {{kind: causal, heads: "${{heads}}", kv_heads: 2, rope_theta: 10000.0, rope_dims: "${{rope_dims}}",
                    rope_short_factors: "${{short[:rope_dims // 2]}}", rope_long_factors: "${{long[:rope_dims // 2]}}",
                    rope_original_length: {ORIGINAL}, rope_attention_factor: {FACTOR}, qkv_bias: false,
                    proj_bias: false, norm_kind: rms, norm_eps: 1.0e-5}}
      - id: mlp
        mlp: {{hidden: 128, act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: 1.0e-5}}
  - id: norm
    norm: {{kind: rms, eps: 1.0e-5}}
  - id: head
    head: {{kind: lm, vocab: "${{vocab}}"}}
mappings: [hf_phi3.yaml]
"""

MAPPING = r"""
archspec: 1
name: hf phi3
identify: ['^model\.layers\.0\.self_attn\.qkv_proj\.weight$']
rules:
  - drop: ['rotary_emb\.inv_freq$', 'rotary_emb\.original_inv_freq$']
  - rename:
      '^model\.embed_tokens\.': embed.tokens.
      '^model\.layers\.(\d+)\.self_attn\.qkv_proj\.': 'layers.\1.attn.qkv.'
      '^model\.layers\.(\d+)\.self_attn\.o_proj\.': 'layers.\1.attn.proj.'
      '^model\.layers\.(\d+)\.input_layernorm\.': 'layers.\1.attn.norm.'
      '^model\.layers\.(\d+)\.mlp\.gate_up_proj\.': 'layers.\1.mlp.fc1.'
      '^model\.layers\.(\d+)\.mlp\.down_proj\.': 'layers.\1.mlp.fc2.'
      '^model\.layers\.(\d+)\.post_attention_layernorm\.': 'layers.\1.mlp.norm.'
      '^model\.norm\.': norm.
      '^lm_head\.': head.fc.
"""


def reference(partial: float):
    rotary = int(16 * partial) // 2
    rope = dict(rope_theta=10000.0, partial_rotary_factor=partial, rope_type="longrope", short_factor=SHORT[:rotary],
                long_factor=LONG[:rotary], original_max_position_embeddings=ORIGINAL)
    config = transformers.Phi3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                                     original_max_position_embeddings=ORIGINAL, rope_parameters=rope,
                                     pad_token_id=None, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    ref = transformers.Phi3ForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.02, norm_scale=0.2)
    return ref


@pytest.fixture(scope="module", params=[1.0, 0.5], ids=["full", "partial"])
def pair(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("phi3")
    (folder / "phi3.yaml").write_text(SPEC)
    (folder / "hf_phi3.yaml").write_text(MAPPING)
    ref = reference(request.param)
    torch.save(ref.state_dict(), folder / "ref.pt")
    ours = archspec.build(str(folder / "phi3.yaml"), {"rotary": request.param}, weights=str(folder / "ref.pt"))
    return ref, ours.eval(), folder, request.param


def prompt(length: int, seed: int = 2):
    return torch.randint(0, 256, (2, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("length", [5, ORIGINAL, ORIGINAL + 1, 40])
def test_logits_within_and_beyond_the_original_length_equal_phi3s(pair, length):
    ref, ours, _, _ = pair
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    ids = prompt(length)
    with torch.no_grad():
        assert (ours(ids) - ref(ids).logits).abs().max() < 1e-5


def test_the_long_factors_matter_beyond_the_original_length_only(pair):
    ref, _, folder, partial = pair
    short_only = archspec.build(str(folder / "phi3.yaml"), {"rotary": partial, "long": SHORT},
                                weights=str(folder / "ref.pt")).eval()
    with torch.no_grad():
        within, beyond = prompt(ORIGINAL), prompt(ORIGINAL + 1)
        assert (short_only(within) - ref(within).logits).abs().max() < 1e-5
        assert (short_only(beyond) - ref(beyond).logits).abs().max() > 1e-3


def test_greedy_tokens_across_the_switch_equal_phi3s_generate(pair):
    """Prompts of 10 and 30 new tokens: the cache refilled at 17 (the long factors for every key),
    as Hugging Face's Phi-3; a left-padded batch too; beam search (a forward a step)."""
    ref, ours, _, _ = pair
    ids = prompt(10, seed=5)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        for kwargs in ({}, {"attention_mask": mask}):
            theirs = ref.generate(ids, max_new_tokens=30, do_sample=False, pad_token_id=0, **kwargs)
            assert torch.equal(ours.generate(ids, max_new_tokens=30, compile=False, **kwargs), theirs)
        theirs = ref.generate(ids, max_new_tokens=12, do_sample=False, num_beams=3, pad_token_id=0)
        assert torch.equal(ours.generate(ids, max_new_tokens=12, num_beams=3), theirs)


def test_compiled_greedy_tokens_across_the_switch_equal_phi3s_generate(pair):
    """compile=True: the refill through the eager prefill, then the compiled step over the same
    cache it wrote, for a batch of two (the second row's tokens are the ones a step reading the
    wrong memory would change)."""
    ref, ours, _, partial = pair
    if partial != 1.0:
        pytest.skip("one compile is enough (the step's rotation is the eager one's)")
    ids = prompt(10, seed=5)
    with torch.no_grad():
        theirs = ref.generate(ids, max_new_tokens=30, do_sample=False, pad_token_id=0)
        assert torch.equal(ours.generate(ids, max_new_tokens=30, compile=True), theirs)


@pytest.mark.parametrize("edit,words", [
    (('rope_long_factors: "${long[:rope_dims // 2]}",', ""), "rope_short_factors goes with rope_long_factors"),
    (('"${long[:rope_dims // 2]}"', '"${long[:rope_dims // 2 - 1]}"'),
     "rope_long_factors has 7 factors and the rotation 8 frequencies"),
    ((f"rope_attention_factor: {FACTOR}, ", ""), "LongRoPE needs rope_attention_factor"),
    (("rope_original_length", "rope_yarn: 4.0, rope_original_length"), "rope_yarn and LongRoPE's factors"),
])
def test_factor_lists_that_cannot_be_are_located_errors(edit, words):
    old, new = edit
    assert old in SPEC
    with pytest.raises(SpecError) as info:
        archspec.check_text(SPEC.replace(old, new), name="phi3.yaml")
    assert words in str(info.value) and "phi3.yaml:" in str(info.value)
