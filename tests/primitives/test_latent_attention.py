"""attention kind=latent (multi-head latent attention, DeepSeek-V2/V3) against Hugging Face's
DeepseekV3Attention, through one-layer DeepseekV3ForCausalLM models (a dense layer: the attention
is what differs), fp32 within 1e-5: the default (a query bottleneck, interleaved rotary pairs),
one query projection without a bottleneck, rotate-half pairs with attention biases, and YaRN with
DeepSeek's mscale on the score scale. Parameters equal (checker, module, reference); the export
with a dynamic batch and length; ONNX Runtime; TensorRT coverage; generate() (a cache of the
latent) as the uncached forward, eagerly and compiled; located errors."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.generate import generate

from tests.conftest import checks_tensorrt_coverage, standalone_copy
from tests.parity.test_vocabulary import TOL, close, perturb_everything

VOCAB, DIM, HEADS = 100, 64, 4
BASE = dict(vocab_size=VOCAB, hidden_size=DIM, intermediate_size=96, num_hidden_layers=1, first_k_dense_replace=1,
            num_attention_heads=HEADS, num_key_value_heads=HEADS, q_lora_rank=24, kv_lora_rank=16,
            qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0}

MAPPING = r"""
name: hf deepseek_v3 (one layer)
rules:
  - fuse:
      match: '^model\.layers\.(\d+)\.mlp\.{part}\.weight$'
      parts: [gate_proj, up_proj]
      into: fc1
  - rename:
      '^model\.embed_tokens\.': embed.tokens.
      '^model\.layers\.0\.self_attn\.q_a_proj\.': attn.q_a.
      '^model\.layers\.0\.self_attn\.q_a_layernorm\.': attn.q_norm.
      '^model\.layers\.0\.self_attn\.q_b_proj\.': attn.q_b.
      '^model\.layers\.0\.self_attn\.q_proj\.': attn.q.
      '^model\.layers\.0\.self_attn\.kv_a_proj_with_mqa\.': attn.kv_a.
      '^model\.layers\.0\.self_attn\.kv_a_layernorm\.': attn.kv_norm.
      '^model\.layers\.0\.self_attn\.kv_b_proj\.': attn.kv_b.
      '^model\.layers\.0\.self_attn\.o_proj\.': attn.proj.
      '^model\.layers\.0\.input_layernorm\.': attn.norm.
      '^model\.layers\.0\.mlp\.fc1\.': mlp.fc1.
      '^model\.layers\.0\.mlp\.down_proj\.': mlp.fc2.
      '^model\.layers\.0\.post_attention_layernorm\.': mlp.norm.
      '^model\.norm\.': norm.
      '^lm_head\.': head.fc.
"""


def spec(attention: str = "", length: str = "[1, 64]") -> str:
    return f"""
name: mla
dims: {{L: {length}}}
inputs:
  ids: {{shape: [B, L], dtype: int64}}
graph:
  - {{id: embed, embed: {{vocab: {VOCAB}, dim: {DIM}, pos: none}}}}
  - {{id: attn, attention: {{kind: latent, heads: {HEADS}, kv_rank: 16, nope_dim: 8, rope_dim: 8, v_dim: 12,
                            norm_kind: rms, norm_eps: 1.0e-6{attention}}}}}
  - {{id: mlp, mlp: {{hidden: 96, act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: 1.0e-6}}}}
  - {{id: norm, norm: {{kind: rms, eps: 1.0e-6}}}}
  - {{id: head, head: {{kind: lm, vocab: {VOCAB}}}}}
outputs: [head]
"""


# (DeepseekV3Config changes, the spec's attention options)
VARIANTS = {
    "default": ({}, ", q_rank: 24"),
    "one_query_projection": ({"q_lora_rank": None}, ""),
    "rotate_half_and_biases": ({"rope_interleave": False, "attention_bias": True},
                               ", q_rank: 24, rope_interleaved: false, qkv_bias: true, proj_bias: true"),
    "yarn_mscale": ({"rope_parameters": YARN},
                    ", q_rank: 24, rope_yarn: 4.0, rope_original_length: 16, rope_attention_factor: 1.0, "
                    f"scale: {(16 ** -0.5) * (0.1 * math.log(4.0) + 1.0) ** 2}"),
}


def reference(changes: dict):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(**{**BASE, **changes}, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    ref = DeepseekV3ForCausalLM._from_config(config, attn_implementation="eager").eval()
    return perturb_everything(ref)


def pair(tmp_path, name: str):
    """(reference, our model loaded from the reference's state dict through MAPPING, the spec's text)."""
    changes, options = VARIANTS[name]
    ref = reference(changes)
    text = spec(options).replace("outputs: [head]", "outputs: [head]\nmappings: [hf.yaml]")
    (tmp_path / "hf.yaml").write_text(MAPPING)
    (tmp_path / "mla.yaml").write_text(text)
    torch.save(ref.state_dict(), tmp_path / "ref.pt")
    return ref, archspec.build(str(tmp_path / "mla.yaml"), weights=str(tmp_path / "ref.pt")).eval(), text


@pytest.mark.parametrize("name", list(VARIANTS))
def test_equals_deepseek_v3_attention(tmp_path, name):
    pytest.importorskip("transformers")
    ref, ours, text = pair(tmp_path, name)
    ids = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(1))  # past YaRN's 16
    with torch.no_grad():
        expected, got = ref(input_ids=ids).logits, ours(ids)
    assert close(expected, got) < TOL, close(expected, got)
    total = sum(p.numel() for p in ref.parameters())
    assert archspec.check_text(text).params == total == sum(p.numel() for p in ours.parameters())


def test_the_options_matter(tmp_path):
    """The same weights without the mscale in the scale, with another YaRN factor, or with the
    other rotary pairs give other logits."""
    pytest.importorskip("transformers")
    ref, ours, _ = pair(tmp_path, "yarn_mscale")
    options = VARIANTS["yarn_mscale"][1]
    ids = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = ref(input_ids=ids).logits
        for changed in (options.split(", scale: ")[0], options.replace("rope_yarn: 4.0", "rope_yarn: 2.0"),
                        options + ", rope_interleaved: false"):
            model = archspec.build_text(spec(changed)).eval()
            model.load_state_dict(ours.state_dict())
            assert close(expected, model(ids)) > 1e-3, changed


def lm(seed: int = 0):
    torch.manual_seed(seed)
    return perturb_everything(archspec.build_text(spec(", q_rank: 24"))).eval()


def test_generate_equals_the_uncached_forward():
    """generate() caches the latent and the rotary key; its greedy tokens are the forward's argmax
    over the whole sequence at every step, at batch 1 and on a left-padded batch."""
    from tests.generate.test_generate import uncached_greedy

    model = lm()
    ids = torch.randint(1, VOCAB, (1, 6), generator=torch.Generator().manual_seed(1))
    out = generate(model, ids, max_new_tokens=12)
    assert torch.equal(out, uncached_greedy(model, ids, 12))
    padded = torch.tensor([[0, 0, 5, 7, 9], [3, 4, 5, 6, 8]])
    mask = (padded != 0).long()
    out = generate(model, padded, attention_mask=mask, max_new_tokens=6)
    assert torch.equal(out[0, 2:], generate(model, padded[:1, 2:], max_new_tokens=6)[0])
    assert torch.equal(out[1], generate(model, padded[1:], max_new_tokens=6)[0])


@pytest.mark.slow
def test_compiled_generate_equals_the_eager_one():
    model = lm()
    ids = torch.randint(1, VOCAB, (2, 6), generator=torch.Generator().manual_seed(1))
    assert torch.equal(generate(model, ids, max_new_tokens=8, compile=True),
                       generate(model, ids, max_new_tokens=8, compile=False))


def test_the_decode_step_exports_with_the_latent_as_its_cache():
    """The exported decode step (compiler/generate/step.py) takes and gives each layer's latent
    [B, 1, P, kv_rank] and rotary key [B, 1, P, rope_dim], and its logits are the forward's."""
    from archspec.compiler.generate.step import DecodeStep, export_decode_step

    model = lm()
    step = DecodeStep(model).eval()
    assert step.cache_shapes(2, 5) == [(2, 1, 5, 16), (2, 1, 5, 8)]
    program = export_decode_step(model, 64).module()
    ids = torch.randint(1, VOCAB, (3, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        prefill = step(ids[:, :7], torch.ones(3, 7, dtype=torch.long), torch.arange(7).expand(3, 7),
                       *[torch.zeros(s) for s in step.cache_shapes(3, 0)])
        assert close(model(ids[:, :7]), prefill[0]) < TOL
        out = program(ids[:, 7:], torch.ones(3, 8, dtype=torch.long), torch.full((3, 1), 7), *prefill[1:])
        assert close(model(ids)[:, -1], out[0][:, -1]) < TOL
        assert [tuple(t.shape) for t in out[1:3]] == [(3, 1, 8, 16), (3, 1, 8, 8)]


def test_exports_with_a_dynamic_batch_and_length():
    text = spec(", q_rank: 24")
    report, model = archspec.check_text(text), lm()
    program = export_program(model, report.graph)
    for shape in ((3, 9), (1, 20)):
        ids = torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            assert close(model(ids), program.module()(ids)) < TOL


def test_onnx_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    report, model = archspec.check_text(spec(", q_rank: 24")), lm()
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_op(tmp_path, capsys):
    checks_tensorrt_coverage(spec(", q_rank: 24"), tmp_path, capsys)


def test_check_reports_the_latent_cache(capsys):
    """`check` counts the latent and the rotary key per token: (16 + 8) x 4 bytes in fp32."""
    from archspec.primitives.kv_cache import cached_layers, line

    layers = cached_layers(archspec.check_text(spec()).graph)
    assert [(l.kv_heads, l.head_dim, l.value_dim, l.numbers_per_token) for l in layers] == [(1, 16, 8, 24)]
    assert line(layers).startswith("KV cache (generate, 1 layer): 96 B per token")


@pytest.mark.parametrize("options, message", [
    (", rope_dim: 7", "rope_dim 7 must be even"),
    (", rope_original_length: 16", "rope_original_length goes with rope_yarn"),
    (", kv_heads: 2", "kv_heads"),
])
def test_located_errors(options, message):
    text = spec().replace(", rope_dim: 8", "") if "rope_dim" in options else spec()
    text = text.replace("norm_eps: 1.0e-6}", f"norm_eps: 1.0e-6{options}}}", 1)
    with pytest.raises(archspec.SpecError) as caught:
        archspec.check_text(text)
    assert message in str(caught.value)
    assert str(caught.value).startswith("<spec>:9:") and "error: attn: " in str(caught.value)  # the node's line


def test_the_standalone_model_py_gives_the_same(tmp_path):
    text = spec(", q_rank: 24")
    report, model = archspec.check_text(text), lm()
    again = standalone_copy(model, report.name, report.file, tmp_path)
    again.load_state_dict(model.state_dict())
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids))


@pytest.mark.parametrize("length", [17, 64])
def test_flops_are_torchs(length):
    """The checker's FLOPs of the node are FlopCounterMode's count of its module (the five linears,
    q k^T over nope + rope and the product with the values of v_dim)."""
    from torch.utils.flop_counter import FlopCounterMode

    text = spec(", q_rank: 24", length=f"[1, {length}]")
    report, model = archspec.check_text(text), archspec.build_text(text).eval()
    x = model.embed(torch.randint(0, VOCAB, (1, length)))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.attn(x)
    assert report.graph.node("attn").meta["cost"].flops == counter.get_total_flops()
