"""Llama 3's rotary scaling (Hugging Face's rope_type llama3: Llama 3.1 to 3.3, Apertus) as one
option, `rope_llama3: <factor>` with `rope_original_length` and the low and high frequency
factors. The Apertus trial pasted the scaled frequencies in as LongRoPE factors computed outside
the spec (stale after any --set of rope_theta or the head width).

Against LlamaForCausalLM with every parameter perturbed by seeded noise: counts, logits, greedy
tokens; the same weights without the scaling give other logits, so the comparison can fail; the
options' mistakes are located errors."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """\
archspec: 1
name: llama3_tiny
params: {vocab: 100, dim: 64, layers: 2, heads: 4, kv_heads: 2, context: 64}
dims:
  L: [1, context]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - id: layers
    repeat: ${layers}
    graph:
      - id: attn
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: 10000.0, qkv_bias: false,
                    proj_bias: false, norm_kind: rms, norm_eps: 1.0e-6, SCALING}
      - {id: mlp, mlp: {hidden: 128, act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: 1.0e-6}}
  - {id: norm, norm: {kind: rms, eps: 1.0e-6}}
  - {id: head, head: {kind: lm, vocab: "${vocab}"}}
mappings: [hf_llama]
"""
SCALING = "rope_llama3: 8.0, rope_original_length: 16, rope_low_freq_factor: 1.0, rope_high_freq_factor: 4.0"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, rms_norm_eps=1e-6,
                         rope_parameters=rope, tie_word_embeddings=False, attn_implementation="eager",
                         eos_token_id=None, bos_token_id=None)
    torch.manual_seed(0)
    ref = LlamaForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.1)
    folder = tmp_path_factory.mktemp("llama3")
    (folder / "llama3.yaml").write_text(SPEC.replace("SCALING", SCALING))
    (folder / "plain.yaml").write_text(SPEC.replace(", SCALING", ""))
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


IDS = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(2))


def test_counts_logits_and_tokens_as_hugging_faces(pair):
    ref, folder = pair
    assert_scaled_as_hugging_faces(ref, folder / "llama3.yaml", folder / "plain.yaml", folder / "ref.pt")


def assert_scaled_as_hugging_faces(ref, scaled, plain, weights) -> None:
    """The spec `scaled` with the reference's `weights`: its counts, logits and greedy tokens; the
    spec `plain` (no scaling) with the same weights gives other logits at these lengths."""
    model = archspec.build(str(scaled), weights=str(weights)).eval()
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    unscaled = archspec.build(str(plain), weights=str(weights)).eval()
    with torch.no_grad():
        theirs = ref(IDS).logits
        assert (theirs - model(IDS)).abs().max() < 1e-5
        assert (theirs - unscaled(IDS)).abs().max() > 1e-3  # the scaling matters at these lengths
    prompt = IDS[:, :20]
    expected = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=10, do_sample=False)
    assert torch.equal(model.generate(prompt, max_new_tokens=10), expected)


@pytest.mark.parametrize("options,words", [
    ("rope_llama3: 8.0", "rope_llama3 needs rope_original_length"),
    ("rope_low_freq_factor: 2.0", "rope_low_freq_factor goes with rope_llama3"),
    ("rope_llama3: 8.0, rope_original_length: 16, rope_low_freq_factor: 4.0", "must be below rope_high_freq_factor"),
    ("rope_llama3: 8.0, rope_original_length: 16, rope_yarn: 2.0", "two scalings of the same frequencies"),
])
def test_mistakes_are_located_errors(options, words):
    assert_located_error(options, words)


def test_an_original_length_alone_names_llama3_among_the_scalings():
    """The Apertus trial: rope_original_length without a scaling was told of YaRN and LongRoPE only."""
    with pytest.raises(SpecError) as info:
        archspec.check_text(SPEC.replace("SCALING", "rope_original_length: 16"))
    assert "`rope_llama3: <factor>` (Llama 3)" in str(info.value.diagnostics[0].hint)


def assert_located_error(options: str, words: str) -> None:
    """The spec with these rotary `options` is a located error saying `words`."""
    with pytest.raises(SpecError) as info:
        archspec.check_text(SPEC.replace("SCALING", options))
    assert words in info.value.diagnostics[0].message and info.value.diagnostics[0].loc is not None
