"""The score part `disentangled` (DeBERTa's content-to-position and position-to-content terms
from shared relative embeddings with log buckets) against Hugging Face's DebertaV2Attention
(DisentangledSelfAttention and its post-norm output) with perturbed weights: shared and own
position projections, both terms and one, lengths past the log buckets; parameter counts; the
checked scale; export with a dynamic batch and length."""

from __future__ import annotations

import math

import pytest
import torch

import archspec
from archspec.compiler.backends.export import export_program
from archspec.core.errors import SpecError

DIM, HEADS, BUCKETS, MAX_POSITION = 64, 4, 8, 32
SPAN = BUCKETS


def spec(terms=("c2p", "p2c"), share: bool = True, length: str = "20") -> str:
    scale = 1 / math.sqrt(DIM // HEADS * (1 + len(terms)))
    part = (f"{{disentangled: {{embeddings: rel, buckets: {BUCKETS}, max_position: {MAX_POSITION}, "
            f"terms: [{', '.join(terms)}], share_keys: {str(share).lower()}}}}}")
    return (f"name: deberta_attention\ndims: {{L: [1, 64]}}\ninputs:\n  x: [B, {length}, {DIM}]\ngraph:\n"
            f"  - {{id: rel, param: {{shape: [{2 * SPAN}, {DIM}]}}}}\n"
            f"  - {{id: attn, from: [x, rel], attention: {{kind: global, heads: {HEADS}, norm: post, norm_eps: 1.0e-7, "
            f"scale: {scale!r}, scores: [{part}]}}}}\noutputs: [attn]\n")


def reference(terms, share):
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Attention

    config = DebertaV2Config(hidden_size=DIM, num_attention_heads=HEADS, intermediate_size=4 * DIM,
                             relative_attention=True, position_buckets=BUCKETS, max_relative_positions=MAX_POSITION,
                             pos_att_type=list(terms), share_att_key=share, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0, layer_norm_eps=1e-7)
    torch.manual_seed(0)
    ref = DebertaV2Attention(config).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return ref


def weights_of(ref, rel) -> dict:
    s = ref.self
    weights = {"rel.value": rel[None],
               "attn.qkv.weight": torch.cat([s.query_proj.weight, s.key_proj.weight, s.value_proj.weight]),
               "attn.qkv.bias": torch.cat([s.query_proj.bias, s.key_proj.bias, s.value_proj.bias]),
               "attn.proj.weight": ref.output.dense.weight, "attn.proj.bias": ref.output.dense.bias,
               "attn.norm.weight": ref.output.LayerNorm.weight, "attn.norm.bias": ref.output.LayerNorm.bias}
    for name in ("pos_key_proj", "pos_query_proj"):
        if hasattr(s, name):
            weights[f"attn.disentangled.{name}.weight"] = getattr(s, name).weight
            weights[f"attn.disentangled.{name}.bias"] = getattr(s, name).bias
    return weights


def run_reference(ref, x, rel):
    mask = torch.ones(x.shape[0], 1, x.shape[1], x.shape[1], dtype=torch.bool)
    with torch.no_grad():
        out = ref(x, mask, rel_embeddings=rel)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("terms, share", [(("c2p", "p2c"), True), (("c2p", "p2c"), False), (("c2p",), False)],
                         ids=["shared", "own", "c2p"])
def test_disentangled_equals_deberta_v2_attention(terms, share):
    ref = reference(terms, share)
    rel = torch.randn(2 * SPAN, DIM)
    model = archspec.build_text(spec(terms, share)).eval()
    model.load_state_dict(weights_of(ref, rel), strict=True)
    x = torch.randn(2, 20, DIM)  # 20 > the buckets' ±4: log-spaced positions
    with torch.no_grad():
        ours = model(x)
    expected = run_reference(ref, x, rel)
    assert torch.allclose(ours, expected, atol=1e-5, rtol=1e-5), (ours - expected).abs().max()
    params = archspec.check_text(spec(terms, share)).params
    assert params == sum(p.numel() for p in ref.parameters()) + rel.numel()  # the embeddings: a param of the spec
    with torch.no_grad():
        model.attn.disentangled.scale = 0.0  # the terms matter at these weights
        assert not torch.allclose(model(x), expected, atol=1e-3)


def test_it_exports_with_a_dynamic_batch_and_length():
    text = spec(length="L")
    ref, rel = reference(("c2p", "p2c"), True), torch.randn(2 * SPAN, DIM)
    model = archspec.build_text(text).eval()
    model.load_state_dict(weights_of(ref, rel))
    program = export_program(model, archspec.check_text(text).graph)
    for shape in ((3, 9), (1, 40)):
        x = torch.randn(*shape, DIM)
        with torch.no_grad():
            assert torch.allclose(program.module()(x), run_reference(ref, x, rel), atol=1e-5)


@pytest.mark.parametrize("old, new, words", [
    (f"scale: {1 / math.sqrt(DIM // HEADS * 3)!r}, ", "", r"DeBERTa scales every term by 1/sqrt\(head_dim x 3\)"),
    ("shape: [16, 64]", "shape: [12, 64]", r"the relative embeddings 'rel' must be \[1, 16, 64\]"),
    ("from: [x, rel]", "from: x", r"reads 2 input\(s\) \(x, rel\)"),
])
def test_what_does_not_fit_is_refused(old, new, words):
    assert old in spec()
    with pytest.raises(SpecError, match=words):
        archspec.check_text(spec().replace(old, new))
