"""The attention primitive's YaRN rotary option (`rope_yarn` and its rope_* options) against
Hugging Face's rotary embedding classes: GptOssRotaryEmbedding (rope_type yarn, truncate false)
and LlamaRotaryEmbedding with yarn parameters (truncate true, a given attention factor). The
inv_freq buffer and the cos/sin tables (the attention factor applied to both) must be equal;
then one attention node with YaRN against GptOssAttention fed HF's own tables, fp32, 1e-5."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.compiler.modules.attention.sequence import Rotary

pytest.importorskip("transformers")


def tables(rotary: Rotary, length: int):
    """Our cos, sin [L, dims] as `rotate` applies them (attention factor included)."""
    angles = rotary.spread(torch.arange(length, dtype=torch.float32)[:, None] * rotary.inv_freq[None, :])
    return angles.cos() * rotary.factor, angles.sin() * rotary.factor


def gpt_oss_rotary(**rope):
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    config = GptOssConfig(head_dim=32, num_attention_heads=8, hidden_size=256)
    config.rope_parameters.update(rope)
    return config, GptOssRotaryEmbedding(config)


@pytest.mark.parametrize("rope", [{}, {"truncate": True}, {"factor": 8.0, "beta_fast": 16.0, "rope_theta": 10000.0},
                                  {"attention_factor": 1.1, "original_max_position_embeddings": 512}])
def test_yarn_tables_equal_hugging_face(rope):
    config, ref = gpt_oss_rotary(**rope)
    params = config.rope_parameters
    ours = Rotary(32, params["rope_theta"], yarn=dict(
        factor=params["factor"], original_length=params["original_max_position_embeddings"],
        beta_fast=params["beta_fast"], beta_slow=params["beta_slow"], truncate=params.get("truncate", True),
        attention_factor=params.get("attention_factor")))
    assert torch.equal(ours.inv_freq, ref.inv_freq)
    assert ours.factor == ref.attention_scaling
    x = torch.zeros(1, 40, 256)
    cos, sin = ref(x, torch.arange(40)[None])  # GptOss: [1, L, d/2] tables, scaled
    mine_cos, mine_sin = tables(ours, 40)
    assert torch.equal(mine_cos[:, :16], cos[0]) and torch.equal(mine_sin[:, :16], sin[0])


def spec(yarn: str) -> str:
    return ("name: yarn_attention\ndims: {L: [1, 64]}\ninputs:\n  x: [B, L, 64]\ngraph:\n"
            "  - {id: attn, from: x, attention: {kind: causal, heads: 4, kv_heads: 2, head_dim: 16, "
            f"rope_theta: 150000.0, {yarn}norm: none, residual: false}}}}\noutputs: [attn]\n")


def test_yarn_attention_equals_gpt_oss_attention():
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention, GptOssRotaryEmbedding

    config = GptOssConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          num_hidden_layers=1, layer_types=["full_attention"])
    config.rope_parameters.update(original_max_position_embeddings=64)  # the ramp inside the 8 pairs
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = GptOssAttention(config, 0).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        ref.sinks.fill_(-1e4)  # no sink: this test is about the rotary tables
    model = archspec.build_text(spec("rope_yarn: 32.0, rope_original_length: 64, rope_truncate: false, ")).eval()
    model.load_state_dict({"attn.qkv.weight": torch.cat([ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight]),
                           "attn.qkv.bias": torch.cat([ref.q_proj.bias, ref.k_proj.bias, ref.v_proj.bias]),
                           "attn.proj.weight": ref.o_proj.weight, "attn.proj.bias": ref.o_proj.bias})
    x = torch.randn(2, 30, 64)
    tables_ = GptOssRotaryEmbedding(config)(x, torch.arange(30)[None])
    mask = torch.zeros(30, 30).masked_fill(torch.ones(30, 30, dtype=torch.bool).triu(1),
                                           torch.finfo(torch.float32).min)[None, None]
    with torch.no_grad():
        expected, ours = ref(x, tables_, mask)[0], model(x)
        plain = archspec.build_text(spec("")).eval()
        plain.load_state_dict(model.state_dict())
        assert not torch.allclose(plain(x), expected, atol=1e-3)  # YaRN changes the output here
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()


@pytest.mark.parametrize("options, message", [
    ("rope_yarn: 32.0, ", None),
    ("rope_truncate: false, ", "rope_truncate goes with rope_yarn"),
    ("rope_attention_factor: null, ", None),  # none is the default (a layer without the scaling: Gemma 3 trial)
    ("rope_attention_factor: 1.0, ", "rope_attention_factor goes with rope_yarn"),
])
def test_yarn_options_are_checked(options, message):
    from archspec.core.errors import SpecError

    text = spec(options)
    if message is None:
        archspec.check_text(text)
        return
    with pytest.raises(SpecError, match=message):
        archspec.check_text(text)
