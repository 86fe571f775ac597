"""specs/deepseek_v3.yaml against Hugging Face transformers' DeepseekV3ForCausalLM, in the manner
of tests/parity/test_gpt_oss.py.

The reference is DeepseekV3Config(vocab_size=1000, hidden_size=256, intermediate_size=512,
moe_intermediate_size=128, num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=8,
num_key_value_heads=8, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16,
v_head_dim=24, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=4,
topk_group=2) (the spec's defaults): multi-head latent attention (`kind: latent`), one dense
layer, then DeepSeek's routed experts. Seeded noise goes on every parameter and on the routers'
correction biases (buffers, zero at init), the state dict is saved, and
`archspec.build(spec, weights=FILE)` alone loads it through mappings/hf_deepseek_v3.yaml. Then:
parameter counts equal (trainable and total; reference = module = checker); fp32 logits within
1e-5 relative at 12 and 40 tokens; on a left-padded batch, Hugging Face's logits at the real
tokens equal ours on each row's unpadded prompt; greedy generate() (which caches each layer's
latent and rotary key) token for token as Hugging Face's for 32 new tokens at batch 1 and on a
left-padded batch of 3."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.generate.test_generate import one_thread  # noqa: F401
from tests.parity.causal_lm import greedy_equal, logits_equal, padded_logits_equal
from tests.parity.test_vocabulary import ids, perturb_everything

pytest.importorskip("transformers")

SPEC = str(ROOT / "specs" / "deepseek_v3.yaml")
VOCAB = 1000
CONFIG = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
              num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=8, num_key_value_heads=8,
              q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=24,
              n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=4, topk_group=2)


def reference():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(**CONFIG, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return DeepseekV3ForCausalLM._from_config(config, attn_implementation="eager").eval()


def perturbed_reference():
    torch.manual_seed(0)
    ref = perturb_everything(reference())
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the correction biases choose experts: not zero, or a mis-mapped one would pass
        for name, buffer in ref.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.add_(0.05 * torch.randn(buffer.shape, generator=generator))
    return ref


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory):
    ref = perturbed_reference()
    path = scratch(request, tmp_path_factory, "weights") / "deepseek_v3.pt"
    torch.save(ref.state_dict(), path)
    return ref, archspec.build(SPEC, weights=str(path)).eval()


def test_the_reference_config_is_as_the_spec_says():
    """The header's defaults: plain rotary (theta 10000, interleaved pairs), RMSNorm eps 1e-6, no
    attention biases, routed_scaling_factor 2.5, normalised top-k, silu, an untied head."""
    from transformers import DeepseekV3Config

    config = DeepseekV3Config(**CONFIG)
    assert config.rope_parameters == {"rope_theta": 10000.0, "rope_type": "default"} and config.rope_interleave
    assert config.rms_norm_eps == 1e-6 and not config.attention_bias and not config.tie_word_embeddings
    assert config.routed_scaling_factor == 2.5 and config.norm_topk_prob and config.hidden_act == "silu"


def test_parameter_counts(pair):
    ref, ours = pair
    total = sum(p.numel() for p in ref.parameters())
    assert total == 3_031_072 == archspec.check(SPEC).params == sum(p.numel() for p in ours.parameters())
    assert sum(p.numel() for p in ref.parameters() if p.requires_grad) == \
        sum(p.numel() for p in ours.parameters() if p.requires_grad) == total


def test_the_correction_biases_load(pair):
    ref, ours = pair
    for layer in (1, 2):
        expected = ref.model.layers[layer].mlp.gate.e_score_correction_bias
        assert expected.abs().max() > 0 and torch.equal(ours.get_submodule(f"layers.{layer}.mlp.router").correction,
                                                        expected)


@pytest.mark.parametrize("length", [12, 40])
def test_logits_match(pair, length):
    logits_equal(*pair, length, VOCAB)


def test_logits_on_a_left_padded_batch(pair):
    padded_logits_equal(*pair)


def test_greedy_equals_hugging_faces_for_32_tokens(pair, one_thread):  # noqa: F811
    greedy_equal(*pair, new=32, vocab=VOCAB)


def test_generate_caches_the_latent_not_the_expanded_keys(pair):
    """Each layer's cache holds its latent [B, 1, slots, kv_rank] and rotary key [B, 1, slots,
    rope_dim]: 48 numbers per token, where expanded keys and values would take 8 x (48 + 24)."""
    from archspec.compiler.generate.cache import DecodeState
    from archspec.compiler.generate.driver import decoder_of

    _, ours = pair
    decoder = decoder_of(ours)
    prompt = ids(2, 5, VOCAB)
    cache = decoder.new_cache(DecodeState(torch.ones_like(prompt), 9))
    with torch.no_grad():
        decoder.logits(prompt, cache)
    shapes = [(tuple(cache.layer(p).keys.shape), tuple(cache.layer(p).values.shape)) for p in decoder.paths]
    assert shapes == [((2, 1, 9, 32), (2, 1, 9, 16))] * 3
    from archspec.primitives.kv_cache import cached_layers, summary

    layers = cached_layers(archspec.check(SPEC).graph)  # what `check` reports
    assert [(layer.kv_heads, layer.head_dim, layer.value_dim) for layer in layers] == [(1, 32, 16)] * 3
    assert summary(layers)["bytes_per_token"]["fp32"] == 3 * (32 + 16) * 4


def test_generate_counts_the_latent_cache_before_allocating(pair):
    """generate's memory check (and bench --generate's cache bytes) count what a latent layer
    caches, 48 numbers per token: the bytes `check` reports per token, times the tokens."""
    from archspec.compiler.backends.bench_generate import kv_cache_bytes
    from archspec.compiler.generate.arguments import SAMPLING_COPIES, needed_bytes
    from archspec.compiler.generate.driver import decoder_of

    _, ours = pair
    decoder = decoder_of(ours)
    per_token = 3 * (32 + 16) * 4
    sampling = 2 * 16 * 8 + SAMPLING_COPIES * 2 * VOCAB * 4  # the ids and the sampling buffers
    assert needed_bytes(decoder, batch=2, prompt=10, max_new_tokens=6) - sampling == 2 * 16 * per_token
    assert kv_cache_bytes(ours, batch=2, length=16, dtype=torch.float32) == 2 * 16 * per_token


def test_a_save_pretrained_folder_loads_its_experts_one_by_one(pair, tmp_path):
    """Hugging Face's checkpoint files keep each routed expert as gate_proj/up_proj/down_proj
    of its own (experts.N.*), not its state dict's stacked tensors: the mapping stacks them."""
    from safetensors import safe_open

    ref, ours = pair
    ref.save_pretrained(tmp_path / "hf")
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as f:
        assert any(".mlp.experts.1.up_proj.weight" in key for key in f.keys())  # the files' own naming
    loaded = archspec.build(SPEC, weights=str(tmp_path / "hf" / "model.safetensors")).eval()
    for key, value in ours.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_a_single_query_projection_has_no_bias_as_deepseeks(tmp_path):
    """The DeepSeek-V2 trial: with q_lora_rank None and attention_bias, Hugging Face's q_proj has
    no bias (q_a_proj and kv_a_proj_with_mqa have one); archspec's latent put one on it, and the
    checkpoint failed to load for 'q.bias'. Now the counts and the logits are the reference's."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(**{**CONFIG, "q_lora_rank": None, "num_hidden_layers": 2}, attention_bias=True,
                              bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    ref = perturb_everything(DeepseekV3ForCausalLM._from_config(config, attn_implementation="eager").eval())
    text = open(SPEC).read().replace('q_rank: "${q_rank}",', 'q_rank: "${q_rank}", qkv_bias: true, proj_bias: true,')
    spec = tmp_path / "deepseek_v3.yaml"
    spec.write_text(text)
    torch.save(ref.state_dict(), tmp_path / "ref.pt")
    ours = archspec.build(str(spec), {"q_rank": None, "layers": 2}, weights=str(tmp_path / "ref.pt")).eval()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    tokens = ids(2, 9, VOCAB)
    with torch.no_grad():
        assert (ours(tokens) - ref(tokens).logits).abs().max() < 1e-4
