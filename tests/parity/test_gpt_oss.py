"""specs/gpt_oss.yaml against Hugging Face transformers' GptOssForCausalLM, in the manner of
tests/parity/test_mixtral.py and tests/generate/test_gemma2_generate.py.

The reference is GptOssConfig(vocab_size=1000, hidden_size=256, intermediate_size=256,
num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
num_local_experts=4, num_experts_per_tok=2, sliding_window=16, swiglu_limit=0.3) (the spec's
defaults): YaRN rotary (factor 32, truncate false), attention sinks, layers alternating sliding
and full attention, the clamped SwiGLU experts. Seeded noise goes on every parameter, its state
dict is saved, and `archspec.build(spec, weights=FILE)` alone loads it through
mappings/hf_gpt_oss.yaml. Then: parameter counts equal (trainable and total; reference = module
= checker); fp32 logits within 1e-5 relative at 12 tokens and at 40 (past the window of 16); on a
left-padded batch, Hugging Face's logits (with its attention mask and the positions generate
gives, counted from each row's first real token) at the real tokens equal ours on each row's
unpadded prompt; greedy generate() token for token as Hugging Face's generate for 32 new tokens
at batch 1 and on a left-padded batch of 3."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.generate.test_generate import one_thread  # noqa: F401
from tests.parity.causal_lm import greedy_equal, logits_equal, padded_logits_equal
from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers")

SPEC = str(ROOT / "specs" / "gpt_oss.yaml")
VOCAB, NEW = 1000, 32
CONFIG = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=2, head_dim=32, num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
              swiglu_limit=0.3)


def reference():
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(**CONFIG, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return GptOssForCausalLM._from_config(config, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory):
    torch.manual_seed(0)
    ref = perturb_everything(reference())
    path = scratch(request, tmp_path_factory, "weights") / "gpt_oss.pt"
    torch.save(ref.state_dict(), path)
    return ref, archspec.build(SPEC, weights=str(path)).eval()


def test_the_reference_config_is_as_the_spec_says():
    """The header's defaults: YaRN (theta 150000, factor 32, original 4096, betas 32 and 1, no
    truncation), layers sliding then full, RMSNorm eps 1e-5, attention biases, an untied head."""
    from transformers import GptOssConfig

    config = GptOssConfig(**CONFIG)
    rope = config.rope_parameters
    assert rope["rope_type"] == "yarn" and rope["rope_theta"] == 150000.0 and rope["factor"] == 32.0
    assert rope["original_max_position_embeddings"] == 4096 and rope.get("attention_factor") is None
    assert (rope["beta_fast"], rope["beta_slow"], rope["truncate"]) == (32.0, 1.0, False)
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    assert config.rms_norm_eps == 1e-5 and config.attention_bias and not config.tie_word_embeddings
    assert config.swiglu_alpha == 1.702  # quick_gelu's 1.702


def test_parameter_counts(pair):
    ref, ours = pair
    total = sum(p.numel() for p in ref.parameters())
    assert total == 4_334_384 == archspec.check(SPEC).params == sum(p.numel() for p in ours.parameters())
    assert sum(p.numel() for p in ref.parameters() if p.requires_grad) == \
        sum(p.numel() for p in ours.parameters() if p.requires_grad) == total


@pytest.mark.parametrize("length", [12, 40])
def test_logits_match(pair, length):
    logits_equal(*pair, length, VOCAB)


def test_logits_on_a_left_padded_batch(pair):
    padded_logits_equal(*pair)


def test_greedy_equals_hugging_faces_at_batch_1_and_on_a_left_padded_batch(pair, one_thread):  # noqa: F811
    greedy_equal(*pair, new=NEW, vocab=VOCAB)  # past the window: the sliding layers' ring
