"""OLMo-1 (Hugging Face's OlmoForCausalLM) in native words: its LayerNorms have neither weight nor
bias (`norm_affine: false` on the sub-layers, `affine: false` on the final norm) and its q, k, v
projections are clamped (`clip_qkv`). The OLMo user trial wrote each such norm from tensor ops
(7 nodes, 35 in all, and every sub-layer split into its body and an add: 46 nodes where 8 do);
`norm_bias: false`, which the docs named for OLMo then, left a weight: 320 parameters too many.

Against OlmoForCausalLM at a tiny config (eager attention, every parameter perturbed by seeded
noise, loaded through the shipped hf_llama mapping; OLMo has no norm tensors): parameter counts,
logits, greedy tokens against its generate; with the norms' weights the count differs, without
the clamp the logits do, so the comparisons can fail.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything
from archspec.core.errors import SpecError

transformers = pytest.importorskip("transformers")

SPEC = """\
archspec: 1
name: olmo_tiny
params: {vocab: 100, dim: 64, hidden: 128, layers: 2, heads: 4, context: 64, clip: 0.5, affine: false}
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
        attention: {kind: causal, heads: "${heads}", rope_theta: 10000.0, qkv_bias: false, proj_bias: false,
                    clip_qkv: "${clip}", norm_affine: "${affine}"}
      - {id: mlp, mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm_affine: "${affine}"}}
  - {id: norm, norm: {affine: "${affine}"}}
  - {id: head, head: {kind: lm, vocab: "${vocab}"}}
mappings: [hf_llama]  # the shipped mapping, by name: Llama's names
"""

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import OlmoConfig, OlmoForCausalLM

    config = OlmoConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        vocab_size=100, rope_theta=10000.0, tie_word_embeddings=False, max_position_embeddings=64,
                        clip_qkv=0.5, attn_implementation="eager", eos_token_id=None, bos_token_id=None)
    torch.manual_seed(0)
    ref = OlmoForCausalLM(config).eval()
    perturb_everything(ref, seed=1, scale=0.1)
    folder = tmp_path_factory.mktemp("olmo")
    (folder / "olmo.yaml").write_text(SPEC)
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


def ours(pair, **overrides):
    _, folder = pair
    return archspec.build(str(folder / "olmo.yaml"), overrides, weights=str(folder / "ref.pt")).eval()


IDS = torch.randint(0, 100, (3, 9), generator=torch.Generator().manual_seed(2))


def test_counts_logits_and_tokens_as_hugging_faces(pair):
    ref, folder = pair
    model = ours(pair)
    count = sum(p.numel() for p in ref.parameters())
    assert sum(p.numel() for p in model.parameters()) == count == archspec.check(str(folder / "olmo.yaml")).params
    with torch.no_grad():
        assert (ref(IDS).logits - model(IDS)).abs().max() < 1e-5
    theirs = ref.generate(IDS[:, :4], attention_mask=torch.ones(3, 4, dtype=torch.long), max_new_tokens=8,
                          do_sample=False)
    assert torch.equal(model.generate(IDS[:, :4], max_new_tokens=8), theirs)


def test_the_norms_weights_and_the_clamp_matter(pair):
    ref, folder = pair
    with_weights = archspec.check(str(folder / "olmo.yaml"), {"affine": True}).params
    assert with_weights == sum(p.numel() for p in ref.parameters()) + 5 * 2 * 64  # 5 LayerNorms' weights and biases
    with torch.no_grad():
        assert (ref(IDS).logits - ours(pair, clip=None)(IDS)).abs().max() > 1e-3


@pytest.mark.parametrize("right, wrong, message", [
    ('norm_affine: "${affine}"}}', 'norm_affine: "${affine}", norm_bias: false}}',
     "norm_bias goes with the norms' weight, and norm_affine: false leaves none"),
    ('norm_affine: "${affine}"}}', 'norm_affine: "${affine}", norm_kind: rms}}',
     "norm_affine: false takes the LayerNorm's weight and bias away, but it is a LayerNorm's option"),
    ('norm: {affine: "${affine}"}', 'norm: {affine: "${affine}", bias: false}',
     "bias goes with a weight, and affine: false leaves the norm without one"),
])
def test_options_that_would_do_nothing_are_located_errors(right, wrong, message):
    assert SPEC.count(right) == 1
    with pytest.raises(SpecError, match=message):
        archspec.check_text(SPEC.replace(right, wrong))


def test_none_written_for_no_clamp_hints_at_null():
    """`clip_qkv: none` is YAML text (the option tables print none for null): the hint says null."""
    with pytest.raises(SpecError) as error:
        archspec.check_text(SPEC.replace('clip_qkv: "${clip}"', "clip_qkv: none"))
    assert "`clip_qkv` must be a number; got 'none'" in str(error.value)
    assert "for no value write null or ~ ('none' is text in YAML)" in str(error.value)


def test_olmo2s_post_norms_start_at_one_as_hugging_faces():
    """OLMo 2 normalises each branch after its body (`norm: res_post`); Swin v2 and timm start that
    norm's weight at zero, Hugging Face's OLMo 2 at one: `res_post_init: ones` (the OLMo trial: a
    fresh build started as another network)."""
    from transformers import Olmo2Config, Olmo2ForCausalLM

    ref = Olmo2ForCausalLM(Olmo2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, vocab_size=50))
    spec = """\
archspec: 1
name: post_normed
params: {init: ones}
inputs:
  x: [B, 4, 32]
graph:
  - {id: attn, attention: {kind: global, heads: 2, norm: res_post, norm_kind: rms, res_post_init: "${init}"}}
"""
    theirs = ref.model.layers[0].post_attention_layernorm.weight
    assert torch.equal(archspec.build_text(spec).attn.norm.weight, theirs)
    assert not archspec.build_text(spec, {"init": "zeros"}).attn.norm.weight.any()  # Swin v2's, the default
    with pytest.raises(SpecError, match="res_post_init sets the res_post norm's first weight, and this norm is pre"):
        archspec.check_text(spec.replace("norm: res_post, ", ""))


OLMOE_ATTENTION = """\
archspec: 1
name: olmoe_attention
params: {clip: 0.5, at: after_qk_norm}
inputs:
  x: [B, 7, 64]
graph:
  - id: attn
    attention: {kind: causal, heads: 4, rope_theta: 10000.0, qkv_bias: false, proj_bias: false, qk_norm: rms,
                qk_norm_over: all_heads, qk_norm_eps: 1.0e-5, clip_qkv: "${clip}", clip_qkv_at: "${at}",
                norm: none, residual: false}
"""


def olmoe_attention_pair():
    """Hugging Face's OlmoeAttention (q_norm and k_norm over all heads, then the clamp) with every
    parameter perturbed, its rotary cos and sin, and an input whose projections the clamp bites."""
    from transformers import OlmoeConfig
    from transformers.models.olmoe.modeling_olmoe import OlmoeAttention, OlmoeRotaryEmbedding

    config = OlmoeConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, clip_qkv=0.5,
                         rope_theta=10000.0, rms_norm_eps=1e-5)
    config._attn_implementation = "sdpa"  # causal without a mask
    torch.manual_seed(0)
    ref = OlmoeAttention(config, layer_idx=0).eval()
    perturb_everything(ref, seed=1, scale=0.3)
    x = torch.randn(2, 7, 64, generator=torch.Generator().manual_seed(3))
    rotary = OlmoeRotaryEmbedding(config)
    return ref, x, rotary(x, torch.arange(7)[None])


def olmoe_attention_ours(ref, **overrides):
    model = archspec.build_text(OLMOE_ATTENTION, overrides).eval()
    qkv = torch.cat((ref.q_proj.weight, ref.k_proj.weight, ref.v_proj.weight))
    model.attn.load_state_dict({"qkv.weight": qkv, "q_norm.weight": ref.q_norm.weight,
                                "k_norm.weight": ref.k_norm.weight, "proj.weight": ref.o_proj.weight})
    return model


def test_clip_qkv_after_qk_norm_as_olmoes():
    """OLMoE (Hugging Face) clamps q and k after q_norm and k_norm, allenai's OLMo code before:
    `clip_qkv_at` says which. The OLMoE trial's spec clamped before the norm, as every clip_qkv did
    then, and built silently 0.74 off Hugging Face's where the clamp bit."""
    ref, x, rotary = olmoe_attention_pair()
    with torch.no_grad():
        theirs = ref(x, rotary, None)[0]
        assert (olmoe_attention_ours(ref)(x) - theirs).abs().max() < 1e-5
        before = olmoe_attention_ours(ref, at="before_qk_norm")(x)
        assert (before - theirs).abs().max() > 1e-2  # the clamp bites this input: the order shows
        unclamped = olmoe_attention_ours(ref, clip=10.0)(x)
        assert (unclamped - theirs).abs().max() > 1e-2


@pytest.mark.parametrize("right, wrong, message", [
    ('clip_qkv_at: "${at}",', "", "clip_qkv with qk_norm: say whether q and k are clamped before qk_norm or after"),
    ('qk_norm: rms,\n                qk_norm_over: all_heads, qk_norm_eps: 1.0e-5,', "",
     "clip_qkv_at says where the clamp falls against qk_norm, and there is no qk_norm"),
    ('clip_qkv: "${clip}",', "", "clip_qkv_at goes with clip_qkv"),
])
def test_where_the_clamp_falls_is_said(right, wrong, message):
    assert OLMOE_ATTENTION.count(right) == 1
    with pytest.raises(SpecError, match=message):
        archspec.check_text(OLMOE_ATTENTION.replace(right, wrong))
