"""Linear position interpolation (Hugging Face's rope_type linear: Gemma 3's full layers, factor 8)
as one option, `rope_linear: <factor>`. The Gemma 3 trial wrote it as LongRoPE with every short
and long factor 8 and an attention factor of 1.

Against LlamaForCausalLM with every parameter perturbed: counts, logits, greedy tokens; the same
weights without the scaling give other logits, so the comparison can fail."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_llama3_rope import SPEC
from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

IDS = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(2))


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
    model = archspec.build(str(folder / "linear.yaml"), weights=str(folder / "ref.pt")).eval()
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    plain = archspec.build(str(folder / "plain.yaml"), weights=str(folder / "ref.pt")).eval()
    with torch.no_grad():
        theirs = ref(IDS).logits
        assert (theirs - model(IDS)).abs().max() < 1e-5
        assert (theirs - plain(IDS)).abs().max() > 1e-3  # the scaling matters
    prompt = IDS[:, :20]
    expected = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=10, do_sample=False)
    assert torch.equal(model.generate(prompt, max_new_tokens=10), expected)


@pytest.mark.parametrize("options,words", [
    ("rope_linear: 8.0, rope_llama3: 8.0, rope_original_length: 16", "two scalings of the same frequencies"),
    ("rope_linear: 0.0", "greater than 0"),
])
def test_mistakes_are_located_errors(options, words):
    with pytest.raises(SpecError) as info:
        archspec.check_text(SPEC.replace("SCALING", options))
    assert words in info.value.diagnostics[0].message and info.value.diagnostics[0].loc is not None
