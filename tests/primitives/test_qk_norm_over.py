"""attention's qk_norm_over and qk_norm_bias: what the query/key norm normalises and weighs,
against the Hugging Face models that need each (before, only one weight [head_dim] shared by
every head could be said, and these models were out of the language):

    each_head, layer without bias   Cohere with use_qk_norm (Command R+): weights [heads, head_dim]
    all_heads, rms                  OLMo 2: weights [heads * head_dim], over all heads of a token
    head, rms, qk_norm_offset 1     Gemma 3: (1 + weight) [head_dim]; sliding and full layers with
                                    their own rotary bases, sandwich norms, a final soft-cap

Small references with seeded noise on every parameter, their state dicts loaded through the
mapping files below; the parameter counts (reference, module, checker), the logits and 10
greedy tokens (eager generate; its cache path normalises as the forward does) must agree."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers")

SIZES = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, bos_token_id=None, eos_token_id=None,
             pad_token_id=None)

COHERE = """
archspec: 1
name: cohere_qk
params: {vocab: 256, dim: 64, hidden: 128, layers: 2, heads: 4, kv_heads: 2, context: 128, eps: 1.0e-5}
dims: {L: [1, context]}
inputs: {input_ids: {shape: [B, L], dtype: int64}}
blocks:
  parallel:                      # x + attn(ln(x)) + mlp(ln(x))
    inputs: [x]
    graph:
      - {id: input_layernorm, from: x, norm: {eps: "${eps}", bias: false}}
      - id: attn
        from: input_layernorm
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: 10000.0,
                    rope_interleaved: true, qk_norm: layer, qk_norm_over: each_head, qk_norm_bias: false,
                    qk_norm_eps: "${eps}", qkv_bias: false, proj_bias: false, norm: none, residual: false}
      - id: mlp
        from: input_layernorm
        mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm: none, residual: false}
      - {id: out, from: [x, attn, mlp], add: {}}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - {id: layers, repeat: "${layers}", parallel: {}}
  - {id: norm, norm: {eps: "${eps}", bias: false}}
  - {id: head, head: {kind: lm, tie: embed}}
  - {id: logits, scale: {factor: 0.0625}}
outputs: {logits: logits}
"""

OLMO2 = """
archspec: 1
name: olmo2_qk
params: {vocab: 256, dim: 64, hidden: 128, layers: 2, heads: 4, kv_heads: 2, context: 128, eps: 1.0e-6}
dims: {L: [1, context]}
inputs: {input_ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - id: layers
    repeat: ${layers}
    graph:
      - id: attn                 # x + norm(attn(x)): OLMo 2's norms after each sub-layer
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: 500000.0,
                    qkv_bias: false, proj_bias: false, norm: res_post, norm_kind: rms, norm_eps: "${eps}",
                    qk_norm: rms, qk_norm_over: all_heads, qk_norm_eps: "${eps}"}
      - id: mlp
        mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm: res_post, norm_kind: rms,
              norm_eps: "${eps}"}
  - {id: norm, norm: {kind: rms, eps: "${eps}"}}
  - {id: head, head: {kind: lm, vocab: "${vocab}"}}
outputs: {logits: head}
"""

GEMMA3 = """
archspec: 1
name: gemma3_qk
params: {vocab: 256, dim: 64, hidden: 128, layers: 4, heads: 4, kv_heads: 2, head_dim: 16, window: 8,
         types: [sliding, sliding, full, sliding], context: 128, eps: 1.0e-6}
dims: {L: [1, context]}
inputs: {input_ids: {shape: [B, L], dtype: int64}}
blocks:
  decoder_layer:
    params: {sliding: ~}
    inputs: [x]
    graph:
      - id: attn
        if: ${sliding}
        attention: {kind: sliding, window: "${window}", heads: "${heads}", kv_heads: "${kv_heads}",
                    head_dim: "${head_dim}", rope_theta: 10000.0, scale: "${32 ** -0.5}", qk_norm: rms,
                    qk_norm_eps: "${eps}", qk_norm_offset: 1.0, qkv_bias: false, proj_bias: false,
                    norm: sandwich, norm_kind: rms, norm_offset: 1.0, norm_eps: "${eps}"}
      - id: attn
        if: ${not sliding}
        attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", head_dim: "${head_dim}",
                    rope_theta: 1000000.0, scale: "${32 ** -0.5}", qk_norm: rms, qk_norm_eps: "${eps}",
                    qk_norm_offset: 1.0, qkv_bias: false, proj_bias: false,
                    norm: sandwich, norm_kind: rms, norm_offset: 1.0, norm_eps: "${eps}"}
      - id: mlp
        mlp: {hidden: "${hidden}", act: gelu_tanh, gated: true, bias: false,
              norm: sandwich, norm_kind: rms, norm_offset: 1.0, norm_eps: "${eps}"}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none, scale: true}}
  - {id: layers, repeat: "${layers}", as: i, decoder_layer: {sliding: "${types[i] == 'sliding'}"}}
  - {id: norm, norm: {kind: rms, offset: 1.0, eps: "${eps}"}}
  - {id: head, head: {kind: lm, tie: embed}}
  - {id: cap_down, scale: {factor: "${1 / 30}"}}
  - {id: cap_tanh, activation: {fn: tanh}}
  - {id: logits, scale: {factor: 30.0}}
outputs: {logits: logits}
"""

COHERE_RENAMES = r"""
      '^model\.layers\.(\d+)\.input_layernorm\.': 'layers.\1.input_layernorm.'
"""

OLMO2_RENAMES = r"""
      '^model\.layers\.(\d+)\.post_attention_layernorm\.': 'layers.\1.attn.norm.'
      '^model\.layers\.(\d+)\.post_feedforward_layernorm\.': 'layers.\1.mlp.norm.'
"""

GEMMA3_RENAMES = r"""
      '^model\.layers\.(\d+)\.input_layernorm\.': 'layers.\1.attn.norm.'
      '^model\.layers\.(\d+)\.post_attention_layernorm\.': 'layers.\1.attn.post_norm.'
      '^model\.layers\.(\d+)\.pre_feedforward_layernorm\.': 'layers.\1.mlp.norm.'
      '^model\.layers\.(\d+)\.post_feedforward_layernorm\.': 'layers.\1.mlp.post_norm.'
"""

MAPPING = r"""
archspec: 1
name: hf {name}
rules:
  - drop: ['rotary_emb\.inv_freq$', 'rotary_emb\.original_inv_freq$'{drop}]
  - fuse:
      match: '^model\.layers\.(\d+)\.self_attn\.{part}\.weight$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - fuse:
      match: '^model\.layers\.(\d+)\.mlp\.{part}\.weight$'
      parts: [gate_proj, up_proj]
      into: fc1
  - rename:
      '^model\.embed_tokens\.': embed.tokens.
      '^model\.layers\.(\d+)\.self_attn\.qkv\.': 'layers.\1.attn.qkv.'
      '^model\.layers\.(\d+)\.self_attn\.o_proj\.': 'layers.\1.attn.proj.'
      '^model\.layers\.(\d+)\.self_attn\.(q_norm|k_norm)\.': 'layers.\1.attn.\2.'
      '^model\.layers\.(\d+)\.mlp\.fc1\.': 'layers.\1.mlp.fc1.'
      '^model\.layers\.(\d+)\.mlp\.down_proj\.': 'layers.\1.mlp.fc2.'
      '^model\.norm\.': norm.
      '^lm_head\.': head.fc.
"""


def gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(**{**SIZES, "num_hidden_layers": 4}, head_dim=16, sliding_window=8, query_pre_attn_scalar=32,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                           "sliding_attention"],
                              rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                              final_logit_softcapping=30.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
    return Gemma3ForCausalLM._from_config(config, attn_implementation="eager")


def cohere():
    from transformers import CohereConfig, CohereForCausalLM

    config = CohereConfig(**SIZES, use_qk_norm=True, tie_word_embeddings=True, logit_scale=0.0625, rope_theta=10000.0)
    return CohereForCausalLM._from_config(config, attn_implementation="eager")


def olmo2():
    from transformers import Olmo2Config, Olmo2ForCausalLM

    config = Olmo2Config(**SIZES, rope_theta=500000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
    return Olmo2ForCausalLM._from_config(config, attn_implementation="eager")


TIED = ", '^lm_head\\.weight$'"
CASES = {"cohere": (cohere, COHERE, TIED, COHERE_RENAMES), "olmo2": (olmo2, OLMO2, "", OLMO2_RENAMES),
         "gemma3": (gemma3, GEMMA3, TIED, GEMMA3_RENAMES)}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    """(the reference, ours with its weights, the checked spec's parameter count)."""
    reference, spec, drop, renames = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    (folder / "spec.yaml").write_text(spec)
    mapping = MAPPING.replace("{name}", request.param).replace("{drop}", drop)
    (folder / "map.yaml").write_text(mapping.replace("  - rename:\n", "  - rename:\n" + renames.lstrip("\n"), 1))
    torch.manual_seed(0)
    ref = perturb_everything(reference().eval())
    ours = archspec.build(folder / "spec.yaml", weights=ref.state_dict(), mapping=folder / "map.yaml").eval()
    return ref, ours, archspec.check(folder / "spec.yaml").params


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_norms_have_the_references_shapes_and_counts(pair):
    ref, ours, checked = pair
    attention = ref.model.layers[0].self_attn
    assert ours.layers[0].attn.q_norm.weight.shape == attention.q_norm.weight.shape
    assert ours.layers[0].attn.k_norm.weight.shape == attention.k_norm.weight.shape
    assert count(ours) == count(ref) == checked


def test_logits_and_greedy_tokens_are_the_references(pair):
    ref, ours, _ = pair
    ids = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(3))  # past Gemma's window
    with torch.no_grad():
        expected = ref(ids).logits
        assert (ours(ids) - expected).abs().max() < 1e-5 * max(1.0, expected.abs().max().item())
        tokens = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
    assert torch.equal(ours.generate(ids, max_new_tokens=10, compile=False), tokens)


@pytest.mark.parametrize("options, message", [
    ("qk_norm_over: each_head", "qk_norm_over goes with qk_norm"),
    ("qk_norm: rms, qk_norm_bias: false", "qk_norm_bias goes with qk_norm: layer"),
    ("qk_norm: layer, qk_norm_over: heads", "qk_norm_over"),
    ("qk_norm: layer, qk_norm_offset: 1.0", "qk_norm_offset goes with qk_norm: rms"),
])
def test_options_that_would_do_nothing_are_located_errors(options, message):
    spec = OLMO2.replace("qk_norm: rms, qk_norm_over: all_heads, ", options + ", ")
    with pytest.raises(SpecError, match=message) as info:
        archspec.check_text(spec)
    assert info.value.diagnostics[0].loc is not None


@pytest.mark.parametrize("options, message", [
    ("qk_norm_affine: false", "qk_norm_affine goes with qk_norm"),
    ("qk_norm: rms, qk_norm_affine: false, qk_norm_offset: 1.0", "qk_norm_offset goes with a weighted qk_norm"),
    ("qk_norm: layer, qk_norm_affine: false, qk_norm_bias: false", "qk_norm_bias goes with a weighted qk_norm"),
])
def test_a_weightless_qk_norm_takes_no_weight_options(options, message):
    spec = OLMO2.replace("qk_norm: rms, qk_norm_over: all_heads, qk_norm_eps: \"${eps}\"", options)
    with pytest.raises(SpecError, match=message):
        archspec.check_text(spec)


@pytest.mark.parametrize("over", ["head", "each_head", "all_heads"])
def test_a_weightless_qk_norm_is_the_rms_norm_alone(over):
    """Llama 4's L2Norm of q and k: x * rsqrt(mean(x^2) + eps) in float32, no parameter."""
    spec = OLMO2.replace("qk_norm: rms, qk_norm_over: all_heads, ",
                         f"qk_norm: rms, qk_norm_over: {over}, qk_norm_affine: false, ")
    model = archspec.build_text(spec)
    norm = model.get_submodule("layers.0.attn").q_norm
    assert sum(p.numel() for p in norm.parameters()) == 0
    assert archspec.check_text(spec).params == sum(p.numel() for p in model.parameters())
    x = torch.randn(2, 4, 5, 16, dtype=torch.bfloat16)
    if over == "all_heads":
        whole = x.float().transpose(1, 2).reshape(2, 5, 64)
        expected = (whole * torch.rsqrt(whole.pow(2).mean(-1, keepdim=True) + 1e-6)).reshape(2, 5, 4, 16).transpose(1, 2)
    else:
        expected = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.equal(norm(x), expected.to(torch.bfloat16))


QK_EPS = """
name: t
inputs: {x: [B, 8, 16]}
graph:
  - {id: ln, from: x, norm: {eps: 1.0e-5}}
  - {id: attn, from: ln, attention: {kind: causal, heads: 2, qk_norm: layer, norm: none, residual: false QK_EPS}}
"""


@pytest.mark.parametrize("given, warned", [("", True), (", qk_norm_eps: 1.0e-5", False),
                                           (", qk_norm_eps: 1.0e-6", False)])
def test_a_default_qk_norm_eps_beside_another_layer_eps_is_told(given, warned):
    """The StableLM trial left qk_norm_eps at its default 1e-6 beside layer_norm_eps 1e-5 and the
    model built without a word, 1.8e-4 off (1.9e-2 at eps 1e-3): the default beside a norm of
    another epsilon (the norm node read, or the node's own) is a warning; giving it, either
    value, is the user's word."""
    found = [w.message for w in archspec.check_text(QK_EPS.replace(" QK_EPS", given)).graph.warnings
             if "qk_norm_eps" in w.message]
    assert bool(found) == warned
    if warned:
        assert found[0].startswith("qk_norm_eps is 1e-06 by default, and the layer's norm has eps 1e-05")


def test_the_nodes_own_norm_is_the_layers_epsilon():
    own = QK_EPS.replace("norm: none, residual: false QK_EPS", "norm_kind: rms, norm_eps: 1.0e-6")
    assert not [w for w in archspec.check_text(own).graph.warnings if "qk_norm_eps" in w.message]
    assert [w for w in archspec.check_text(own.replace("1.0e-6}", "1.0e-5}")).graph.warnings
            if "qk_norm_eps" in w.message]
