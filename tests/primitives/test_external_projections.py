"""`projections: external`: attention over q, k and v made by other nodes. Eleven of fifteen
user trials wrote attention by hand from einsum and softmax because its projections were not
the node's (TimesFM's learned per-dimension query scale, JetMoE's per-expert query and output
projections, Perceiver's query/key width apart from its value width, EfficientViT's cascaded
heads): 18 to 84 nodes a layer, no fused kernel, no cache. Here the node reads them and keeps
the kernel, its mask rule, rotary, grouped key/value heads, the padding mask and generate's
cache, against torch's own SDPA written out in each test."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.onnx import export_onnx
from archspec.compiler.generate import generate
from archspec.compiler.generate.driver import decoder_of

CAUSAL = """
name: external_causal
params: {dim: 32, heads: 4, kv_heads: 2, value_width: 12}
dims: {L: [1, 64]}
inputs:
  input_ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 50, dim: "${dim}", pos: none}}
  - {id: norm, norm: {kind: rms}}
  - {id: q, from: norm, linear: {dim: 32, bias: false}}
  - {id: per_dim, param: {shape: [32], init: normal}}
  - {id: soft, activation: {fn: softplus}}
  - {id: q_scaled, from: [q, soft], multiply: {}}
  - {id: k, from: norm, linear: {dim: 16, bias: false}}
  - {id: v, from: norm, linear: {dim: "${kv_heads * value_width}", bias: false}}
  - id: attn
    from: [q_scaled, k, v]
    attention: {kind: causal, heads: "${heads}", kv_heads: "${kv_heads}", projections: external, rope_theta: 10000.0}
  - {id: o, linear: {dim: "${dim}", bias: false}}
  - {id: res, from: [embed, o], add: {}}
  - {id: head, head: {kind: lm, vocab: 50, bias: false}}
outputs: [head]
"""


def rotated(x, positions):
    """Hugging Face's rotate-half rotary over x [B, h, N, d] at positions [N], theta 10000."""
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))  # [d/2]
    angles = positions.float()[:, None] * inv[None]  # [N, d/2]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # [N, d]
    turned = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + turned * sin


def causal_reference(model, ids):
    """CAUSAL written out: torch's SDPA over the rotated, grouped heads, values 12 wide."""
    e = model.embed.tokens.weight[ids]  # [B, N, 32]
    n = model.norm(e)
    B, N = ids.shape
    q = (n @ model.q.weight.t()) * F.softplus(model.per_dim.value[0])
    q = q.view(B, N, 4, 8).transpose(1, 2)
    k = (n @ model.k.weight.t()).view(B, N, 2, 8).transpose(1, 2)
    v = (n @ model.v.weight.t()).view(B, N, 2, 12).transpose(1, 2)
    q, k = rotated(q, torch.arange(N)), rotated(k, torch.arange(N))
    out = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    out = out.transpose(1, 2).reshape(B, N, 48)  # [B, N, h*dv]
    return model.head(out @ model.o.weight.t() + e)


@pytest.fixture(scope="module")
def causal_model():
    model = archspec.build_text(CAUSAL, seed=0).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return model


def test_the_causal_kernel_over_external_projections_is_torchs(causal_model):
    report = archspec.check_text(CAUSAL)
    assert report.graph.type_of("attn").shape[-1] == 48  # heads x the value width
    assert report.params == sum(p.numel() for p in causal_model.parameters())  # no projection of its own
    ids = torch.randint(0, 50, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (causal_model(ids) - causal_reference(causal_model, ids)).abs().max() < 1e-5


def test_generate_caches_the_external_keys_and_values(causal_model):
    """Cached, eager and compiled, the tokens of a greedy loop over forward; the cache holds
    2 key heads of 8 and values of 12."""
    decoder = decoder_of(causal_model)
    assert decoder.whole_sequence is None and decoder.attention[0].cache_entry() == (2, 8, 12)
    assert "KV cache (generate, 1 layer): 160 B per token" in archspec.check_text(CAUSAL).table()
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(2))
    expected = ids
    with torch.no_grad():
        for _ in range(8):
            expected = torch.cat([expected, causal_model(expected)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(generate(causal_model, ids, max_new_tokens=8), expected)
    assert torch.equal(generate(causal_model, ids[:1], max_new_tokens=8, compile=True), expected[:1])


def test_onnx_runs_the_external_projections(causal_model, tmp_path):
    pytest.importorskip("onnxruntime")
    report = archspec.check_text(CAUSAL)
    result = export_onnx(causal_model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4


def test_global_external_projections_with_a_padding_mask():
    model = archspec.build_text("""
name: external_global
dims: {L: [1, 16]}
inputs:
  x: [B, L, 24]
  mask: {shape: [B, L], dtype: int64}
graph:
  - {id: q, from: x, linear: {dim: 24}}
  - {id: kv, from: x, linear: {dim: 48}}
  - {id: k, from: kv, slice: {along: channels, stop: 24}}
  - {id: v, from: kv, slice: {along: channels, start: 24}}
  - {id: attn, from: [q, k, v, mask], attention: {kind: global, heads: 3, projections: external, padding_mask: true}}
outputs: [attn]
""", seed=3).eval()
    x = torch.randn(2, 6, 24)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        q = (x @ model.q.weight.t() + model.q.bias).view(2, 6, 3, 8).transpose(1, 2)
        kv = x @ model.kv.weight.t() + model.kv.bias
        k, v = (t.reshape(2, 6, 3, 8).transpose(1, 2) for t in kv.split(24, -1))
        keep = mask.bool()[:, None, None, :]
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(2, 6, 24)
        assert (model(x, mask) - want).abs().max() < 1e-5


@pytest.mark.parametrize("change, message", [
    ("projections: external, norm: pre", "norm belongs to the node's own projections and sub-layer"),
    # accepted, then ignored in forward, before (the Doge trial): every sub-layer option is refused alike
    ("projections: external, res_scale: 0.5", "res_scale belongs to the node's own projections and sub-layer"),
    ("projections: external, kind: cross", "unknown key 'projections' in attention (kind cross)"),
    ("projections: external, kv_heads: 4", "external k is 16 wide, and 4 key heads of q's head width 8"),
])
def test_what_external_projections_cannot_take_is_a_located_error(change, message):
    text = CAUSAL.replace("projections: external", change)
    text = text.replace("kind: causal, heads", "heads") if "kind: cross" in change else text
    text = text.replace('kv_heads: "${kv_heads}", ', "") if "kv_heads: 4" in change else text
    with pytest.raises(archspec.SpecError) as caught:
        archspec.check_text(text)
    assert message in caught.value.diagnostics[0].message
    if "kind: cross" in change:  # the hint names the kinds that take it, and no other
        assert caught.value.diagnostics[0].hint == "'projections' is a parameter of kinds alibi, causal, global, sliding"


POOLED_QUERIES = """name: pooled_q
inputs:
  q: [B, 4, 16]
  k: [B, 8, 16]
  v: [B, 8, 24]
  mask: {shape: [B, 8], dtype: int64}
graph:
  - {id: attn, from: [q, k, v, mask], attention: {kind: global, heads: 2, projections: external, padding_mask: true}}
"""


def test_global_attention_over_keys_of_their_own_length_is_sdpas(tmp_path):
    """Funnel's pooled queries over the whole sequence and Nystromformer's landmarks: fewer queries
    than keys over projections of one's own (both trials padded the queries or wrote it out)."""
    report = archspec.check_text(POOLED_QUERIES)
    model = archspec.build_text(POOLED_QUERIES, seed=0).eval()
    q, k, v = torch.randn(2, 4, 16), torch.randn(2, 8, 16), torch.randn(2, 8, 24)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    heads = lambda t, d: t.reshape(2, -1, 2, d).transpose(1, 2)  # noqa: E731 - [B, N, 2d] -> [B, 2, N, d]
    want = F.scaled_dot_product_attention(heads(q, 8), heads(k, 8), heads(v, 12), attn_mask=(mask != 0)[:, None, None])
    with torch.no_grad():
        assert torch.allclose(model(q, k, v, mask), want.transpose(1, 2).reshape(2, 4, 24), atol=1e-6)
    assert report.flops == 2 * 4 * 8 * (16 + 24)  # q·k over q's width, the weights times v over v's
    assert export_onnx(model, report.graph, str(tmp_path / "pooled.onnx")).max_difference < 1e-5


@pytest.mark.parametrize("edit,words", [
    (("kind: global", "kind: causal"), "causal attention's keys are its queries' tokens"),
    (("v: [B, 8, 24]", "v: [B, 6, 24]"), "external v has 6 tokens and k 8: each key has its value"),
    (("padding_mask: true", "padding_mask: true, rope_theta: 10000.0"), "rotary positions turn q and k at their own"),
])
def test_keys_of_another_length_are_refused_where_they_mean_nothing(edit, words):
    text = POOLED_QUERIES.replace(*edit)
    if "v: [B, 6" in text:
        text = text.replace("mask: {shape: [B, 8]", "mask: {shape: [B, 6]")
    with pytest.raises(archspec.SpecError, match=words):
        archspec.check_text(text)


LEARNED_QUERY = """
name: learned_query
inputs: {x: [B, 16, 32]}
graph:
  - {id: q, param: {shape: [1, 32], init: normal}}
  - {id: k, from: x, linear: {dim: 32, bias: false}}
  - {id: v, from: x, linear: {dim: 32, bias: false}}
  - {id: attn, from: [q, k, v], attention: {kind: global, heads: 4, projections: external}}
"""


def test_a_learned_query_asks_every_samples_keys(tmp_path):
    """AIMv2's trial: a batch-1 learned query over batch-B keys was checked as [1, 1, C] and ran
    as [1, 1, B*C], the samples' answers side by side in the channels, without a word. The query
    is every sample's now: [B, 1, C], each row SDPA over its own keys."""
    report = archspec.check_text(LEARNED_QUERY)
    assert str(report.graph.node("attn").type.shape[0]) == "B"
    model = archspec.build_text(LEARNED_QUERY, seed=0).eval()
    x = torch.randn(3, 16, 32)
    heads = lambda t: t.reshape(t.shape[0], -1, 4, 8).transpose(1, 2)  # noqa: E731 - [B, N, 32] -> [B, 4, N, 8]
    with torch.no_grad():
        q = model.q.value.reshape(1, 1, 32).expand(3, 1, 32)
        want = F.scaled_dot_product_attention(heads(q), heads(x @ model.k.weight.T), heads(x @ model.v.weight.T))
        assert torch.allclose(model(x), want.transpose(1, 2).reshape(3, 1, 32), atol=1e-6)
    assert export_onnx(model, report.graph, str(tmp_path / "query.onnx")).max_difference < 1e-5


def test_streams_of_two_batches_are_a_located_error():
    text = LEARNED_QUERY.replace("  - {id: q, param: {shape: [1, 32], init: normal}}",
                                 "  - {id: q, from: x, rearrange: {pattern: 'b (n two) c -> (b two) n c', sizes: {two: 2}}}")
    with pytest.raises(archspec.SpecError, match="reads tensors of batch B.2 and of batch B"):
        archspec.check_text(text)


GRID_PART = """
name: grid_part
inputs: {x: [B, 8, 2, 3]}
graph:
  - {id: q, from: x, to_tokens: {}}
KEYS
  - {id: attn, from: [q, k, k], attention: {kind: global, heads: 2, projections: external, scores: [PART]}}
"""
UNORDERED = "  - {id: k, from: x, rearrange: {pattern: 'b c h w -> b (w h) c', as: tokens}}"
TRANSPOSED = ("  - {id: t, from: x, rearrange: {pattern: 'b c h w -> b c w h', as: image}}\n"
              "  - {id: k, from: t, to_tokens: {}}")
SAME = "  - {id: k, from: x, to_tokens: {}}"


@pytest.mark.parametrize("part", ["offset_table", "{relative_table: {class_tokens: false}}", "decomposed",
                                  "rotary_grid"])
@pytest.mark.parametrize("keys", [UNORDERED, TRANSPOSED])
def test_a_grid_part_refuses_external_keys_off_the_queries_grid(part, keys):
    """The EfficientFormerV2 trial: keys made column by column (no grid), or on the 3x2 grid of the
    transposed image, passed, and each grid part placed them as if on the queries' 2x3 grid
    (0.6 to 2.4 off a softmax that reorders keys and values together)."""
    with pytest.raises(archspec.SpecError, match="the keys on the queries' 2x3 grid, and external k"):
        archspec.check_text(GRID_PART.replace("PART", part).replace("KEYS", keys))
    assert archspec.check_text(GRID_PART.replace("PART", part).replace("KEYS", SAME)).params >= 0  # made as q is
