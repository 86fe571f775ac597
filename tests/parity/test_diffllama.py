"""Differential attention (`attention: {kind: differential}`) against Hugging Face's DiffLlama
(DiffLlamaForCausalLM): two softmax maps per output head over values twice as wide, their
difference weighted by a learned lambda, each head RMS-normalised and scaled by 1 - lambda_init.
The DiffLlama user trial wrote it from einsum, softmax and constants (49 nodes a layer, no
cache); here it is one node a layer, through one SDPA call, and generate caches it.

At a tiny config (every parameter perturbed by seeded noise, loaded through the shipped
hf_llama mapping, whose names DiffLlama keeps): counts, logits at several lengths and layer
counts (lambda_init differs per layer), a training step's gradients, greedy tokens against its
generate (through the cache), ONNX Runtime, and FLOPs against FlopCounterMode's; a lambda or
a lambda_init left out gives other logits, so the comparison can fail.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import count_flops, perturb_everything

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.diffllama")

SPEC = """\
archspec: 1
name: diffllama_tiny
params: {vocab: 101, dim: 64, hidden: 128, layers: 3, heads: 4, kv_heads: 2, context: 64, eps: 1.0e-6}
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
        attention: {kind: differential, heads: "${heads}", kv_heads: "${kv_heads}", rope_theta: 10000.0,
                    lambda_init: "${0.8 - 0.6 * exp(-0.3 * i)}", head_norm_eps: "${eps}", qkv_bias: false,
                    proj_bias: false, norm_kind: rms, norm_eps: "${eps}"}
      - id: mlp
        mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: "${eps}"}
  - {id: norm, norm: {kind: rms, eps: "${eps}"}}
  - {id: head, head: {kind: lm, vocab: "${vocab}"}}
mappings: [hf_llama]  # the shipped mapping: DiffLlama keeps Llama's names (and its lambdas')
"""


def reference(layers: int = 3, heads: int = 4, kv_heads: int = 2):
    from transformers import DiffLlamaConfig, DiffLlamaForCausalLM

    config = DiffLlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=64,
                             rms_norm_eps=1e-6, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(0)
    return perturb_everything(DiffLlamaForCausalLM(config).eval(), seed=1, scale=0.2)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    ref = reference()
    folder = tmp_path_factory.mktemp("diffllama")
    (folder / "diffllama.yaml").write_text(SPEC)
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


def ours(pair, text: str = SPEC, **overrides):
    ref, folder = pair
    (folder / "variant.yaml").write_text(text)
    return archspec.build(str(folder / "variant.yaml"), overrides, weights=str(folder / "ref.pt")).eval()


IDS = torch.randint(0, 101, (3, 13), generator=torch.Generator().manual_seed(2))


def test_counts_and_logits_as_hugging_faces(pair):
    ref, folder = pair
    model = ours(pair)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    assert archspec.check(str(folder / "variant.yaml")).params == sum(p.numel() for p in ref.parameters())
    with torch.no_grad():
        for length in (1, 5, 13):
            theirs, mine = ref(IDS[:, :length]).logits, model(IDS[:, :length])
            assert (theirs - mine).abs().max() < 1e-5 * max(1.0, theirs.abs().max()), length


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2)])
def test_other_head_counts_as_hugging_faces(tmp_path, heads, kv_heads):
    """The value halves and groups: every head its own key/value head, and 4 query heads a group."""
    ref = reference(layers=1, heads=heads, kv_heads=kv_heads)
    torch.save(ref.state_dict(), tmp_path / "ref.pt")
    (tmp_path / "spec.yaml").write_text(SPEC)
    model = archspec.build(str(tmp_path / "spec.yaml"), {"layers": 1, "heads": heads, "kv_heads": kv_heads},
                           weights=str(tmp_path / "ref.pt")).eval()
    with torch.no_grad():
        theirs, mine = ref(IDS).logits, model(IDS)
    assert (theirs - mine).abs().max() < 1e-5 * max(1.0, theirs.abs().max())


def test_a_training_step_as_hugging_faces(pair):
    ref, _ = pair
    model = ours(pair).train()
    ref.train()
    labels = IDS.clone()
    loss_theirs = ref(IDS, labels=labels).loss
    logits = model(IDS)
    loss_mine = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 101), labels[:, 1:].reshape(-1))
    assert abs(loss_theirs.item() - loss_mine.item()) < 1e-5
    loss_theirs.backward()
    loss_mine.backward()
    for layer in range(3):
        for name in ("lambda_q1", "lambda_k2"):
            theirs = getattr(ref.model.layers[layer].self_attn, name).grad
            mine = model.get_parameter(f"layers.{layer}.attn.{name}").grad
            assert torch.allclose(theirs, mine, atol=1e-6, rtol=1e-4), (layer, name)
    ref.eval()
    ref.zero_grad()


def test_greedy_tokens_as_hugging_faces_generate_through_the_cache(pair):
    ref, _ = pair
    model = ours(pair)
    assert model.facts.decode_refusal is None and len(model.facts.cached) == 3  # a cache, not the whole sequence
    theirs = ref.generate(IDS[:, :4], attention_mask=torch.ones(3, 4, dtype=torch.long), max_new_tokens=12,
                          do_sample=False)
    assert torch.equal(model.generate(IDS[:, :4], max_new_tokens=12), theirs)


@pytest.mark.parametrize("change", ["lambda_init", "lambda"])
def test_lambda_matters(pair, change):
    ref, _ = pair
    if change == "lambda_init":
        model = ours(pair, SPEC.replace('"${0.8 - 0.6 * exp(-0.3 * i)}"', "0.8"))
    else:
        model = ours(pair)
        with torch.no_grad():
            model.get_parameter("layers.1.attn.lambda_q1").zero_()
    with torch.no_grad():
        gap = (model(IDS) - ref(IDS).logits).abs().max()
    assert gap > 1e-3, change


def test_flops_are_flop_counters(pair):
    """The cost rule's FLOPs, at one length, equal torch's FlopCounterMode's for the forward."""
    ref, folder = pair
    report = archspec.check(str(folder / "diffllama.yaml"), overrides={"context": 13})
    model = ours(pair)
    assert report.flops == count_flops(lambda: model(IDS[:1]))  # SDPA as matmuls (FlopCounterMode counts them)


def test_onnx_runtime_gives_the_eager_logits(pair, tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import write_model_onnx

    _, folder = pair
    model = ours(pair)
    graph = archspec.check(str(folder / "variant.yaml")).graph
    result = write_model_onnx(model, graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4, result.notes
