"""Linear position interpolation (Hugging Face's rope_type linear: Gemma 3's full layers, factor 8)
as one option, `rope_linear: <factor>`. The Gemma 3 trial wrote it as LongRoPE with every short
and long factor 8 and an attention factor of 1.

Against LlamaForCausalLM with every parameter perturbed: counts, logits, greedy tokens; the same
weights without the scaling give other logits, so the comparison can fail."""

from __future__ import annotations

import pytest
import torch

from tests.parity.test_llama3_rope import SPEC, assert_located_error, assert_scaled_as_hugging_faces
from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, max_position_embeddings=64, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 8.0},
                         tie_word_embeddings=False, attn_implementation="eager", eos_token_id=None, bos_token_id=None)
    torch.manual_seed(0)
    ref = LlamaForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.1)
    folder = tmp_path_factory.mktemp("linear")
    (folder / "linear.yaml").write_text(SPEC.replace("SCALING", "rope_linear: 8.0"))
    (folder / "plain.yaml").write_text(SPEC.replace(", SCALING", ""))
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


def test_counts_logits_and_tokens_as_hugging_faces(pair):
    ref, folder = pair
    assert_scaled_as_hugging_faces(ref, folder / "linear.yaml", folder / "plain.yaml", folder / "ref.pt")


@pytest.mark.parametrize("options,words", [
    ("rope_linear: 8.0, rope_llama3: 8.0, rope_original_length: 16", "two scalings of the same frequencies"),
    ("rope_linear: 0.0", "greater than 0"),
])
def test_mistakes_are_located_errors(options, words):
    assert_located_error(options, words)
