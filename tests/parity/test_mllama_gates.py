"""`residual_gate: tanh` against Hugging Face's MllamaCrossAttentionDecoderLayer: x + tanh(g) *
cross_attn(norm(x), memory), then the same for the MLP, g one learned number per sub-layer. The
Mllama trial wrote each gate as four nodes (a param, tanh, multiply, add), and its [1] gate came
out [1, 1]; now `cross_attn_attn_gate` loads into `<node>.residual_gate` as it is."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

mllama = pytest.importorskip("transformers.models.mllama.modeling_mllama")
MllamaTextConfig = pytest.importorskip("transformers").MllamaTextConfig

SPEC = """name: gated_cross_layer
inputs:
  x: [B, 7, 32]
  memory: [B, 5, 32]
graph:
  - id: cross_attn
    from: [x, memory]
    attention: {kind: cross, heads: 4, kv_heads: 2, qkv_bias: false, proj_bias: false, qk_norm: rms,
                qk_norm_eps: 1.0e-5, norm_kind: rms, norm_eps: 1.0e-5, residual_gate: tanh}
  - id: mlp
    mlp: {hidden: 64, act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: 1.0e-5, residual_gate: tanh}
"""


def hf_layer():
    config = MllamaTextConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[0],
                              rms_norm_eps=1e-5)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    layer = mllama.MllamaCrossAttentionDecoderLayer(config, layer_idx=0).eval()
    perturb_everything(layer, seed=1)
    with torch.no_grad():  # the gates start at 0, the identity: move them away from it
        layer.cross_attn_attn_gate.fill_(0.8)
        layer.cross_attn_mlp_gate.fill_(-0.4)
    return layer


def ours_from(layer):
    model = archspec.build_text(SPEC, seed=0).eval()
    sd = layer.state_dict()
    attn, mlp = "cross_attn.", "mlp."
    mapped = {
        "cross_attn.norm.weight": sd["input_layernorm.weight"],
        "cross_attn.q.weight": sd[attn + "q_proj.weight"],
        "cross_attn.kv.weight": torch.cat([sd[attn + "k_proj.weight"], sd[attn + "v_proj.weight"]]),
        "cross_attn.proj.weight": sd[attn + "o_proj.weight"],
        "cross_attn.q_norm.weight": sd[attn + "q_norm.weight"],
        "cross_attn.k_norm.weight": sd[attn + "k_norm.weight"],
        "cross_attn.residual_gate": sd["cross_attn_attn_gate"],
        "mlp.norm.weight": sd["post_attention_layernorm.weight"],
        "mlp.fc1.weight": torch.cat([sd[mlp + "gate_proj.weight"], sd[mlp + "up_proj.weight"]]),
        "mlp.fc2.weight": sd[mlp + "down_proj.weight"],
        "mlp.residual_gate": sd["cross_attn_mlp_gate"],
    }
    model.load_state_dict(mapped)  # strict: exactly these tensors, the gates of HF's shape [1]
    return model


def test_the_same_as_mllamas_gated_cross_attention_layer():
    layer = hf_layer()
    model = ours_from(layer)
    assert archspec.check_text(SPEC).params == sum(p.numel() for p in layer.parameters())
    x, memory = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    with torch.no_grad():
        want = layer(x, memory, None, None, None)
        want = want[0] if isinstance(want, tuple) else want
        got = model(x, memory)
    assert (got - want).abs().max() < 1e-5 * max(1.0, want.abs().max().item())


def test_a_gate_at_zero_is_the_identity_and_trains():
    model = archspec.build_text(SPEC, seed=0)
    x, memory = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    out = model(x, memory)
    assert torch.equal(out, x)
    out.square().sum().backward()
    assert model.cross_attn.residual_gate.grad.abs().item() > 0


def test_external_projections_refuse_the_gate():
    spec = """name: e
inputs:
  q: [B, 7, 32]
  k: [B, 7, 32]
  v: [B, 7, 32]
graph:
  - {from: [q, k, v], attention: {kind: global, heads: 4, projections: external, residual_gate: tanh}}
"""
    with pytest.raises(archspec.SpecError, match="residual_gate"):
        archspec.check_text(spec)
