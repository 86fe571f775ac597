"""The general ops and the options of issue 9, each against an independent computation
written here from its definition (not archspec's own module), plus torch's shape propagation
and parameter counts against the checker's.

Small specs, built once per test; all CPU fp32.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.export import example_inputs

from tests.conftest import build_counted, checks_shapes

TOL = 1e-5


TOKENS = """
name: t
inputs:
  x: [B, 6, 8]
  y: [B, 6, 8]
graph:
"""


def test_add_and_multiply_broadcast():
    report, model = build_counted(TOKENS + """
  - {id: s, from: [x, y], add: {}}
  - {id: p, param: {shape: [8], init: normal}}
  - {id: m, from: [s, p], multiply: {}}
""")
    x, y = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    scale = model.p.value  # [1, 8]
    assert torch.allclose(model(x, y), (x + y) * scale, atol=TOL)
    checks_shapes(report, model, (x, y))


def test_shapes_that_do_not_broadcast_are_refused():
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(TOKENS.replace("y: [B, 6, 8]", "y: [B, 5, 8]") + "  - {from: [x, y], add: {}}\n")
    assert info.value.message == "add: shapes [B, 6, 8] and [B, 5, 8] do not broadcast (dimension 1: 6 vs 5)"


def test_concat_slice_select():
    report, model = build_counted(TOKENS + """
  - {id: both, from: [x, y], concat: {along: tokens}}
  - {id: middle, slice: {start: 4, stop: 9}}
  - {id: wide, from: [x, y], concat: {along: channels}}
  - {id: first, from: wide, select: {index: -1}}
outputs: [middle, first]
""")
    x, y = torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    middle, first = model(x, y)
    assert torch.equal(middle, torch.cat([x, y], 1)[:, 4:9])
    assert torch.equal(first, torch.cat([x, y], -1)[:, -1])
    checks_shapes(report, model, (x, y))


GRID = """
name: g
inputs:
  image: [B, 3, 16, 16]
graph:
  - id: patch
    patchify: {patch: 4, dim: 8}
"""


def test_learned_tokens_join_the_prefix_and_slicing_them_off_keeps_the_grid():
    report, model = build_counted(GRID + """
  - {id: cls, tokens: {count: 1}}
  - {id: reg, tokens: {count: 2, at: 1}}
  - {id: grid, slice: {start: 3}}
  - {id: img, to_image: {}}
""")
    assert report.graph.type_of("reg").prefix == 3 and report.graph.type_of("grid").grid == (4, 4)
    image = torch.randn(2, 3, 16, 16)
    patches = model.patch(image)  # [2, 16, 8]
    expected = patches.transpose(1, 2).reshape(2, 8, 4, 4)
    assert torch.equal(model(image), expected)
    with torch.no_grad():
        tokens = model.reg(model.cls(patches))
    assert torch.equal(tokens[:, 0], model.cls.tokens[0, 0].expand(2, -1))
    assert torch.equal(tokens[:, 1:3], model.reg.tokens[0].expand(2, -1, -1))
    assert torch.equal(tokens[:, 3:], patches)
    checks_shapes(report, model, (image,))


def test_to_tokens_pixel_shuffle_and_linear():
    report, model = build_counted(GRID + """
  - {id: img, to_image: {}}
  - {id: up, pixel_shuffle: {factor: 2}}
  - {id: tok, to_tokens: {}}
  - {id: lin, linear: {dim: 5, bias: false}}
  - {id: act, activation: {fn: silu}}
  - {id: drop, dropout: {rate: 0.5}}
""")
    assert report.graph.type_of("up").shape[1:] == (2, 8, 8) and report.graph.type_of("tok").grid == (8, 8)
    image = torch.randn(2, 3, 16, 16)
    patches = model.patch(image).transpose(1, 2).reshape(2, 8, 4, 4)
    up = F.pixel_shuffle(patches, 2)  # [2, 2, 8, 8]
    expected = F.silu(up.flatten(2).transpose(1, 2) @ model.lin.weight.t())
    assert torch.allclose(model(image), expected, atol=TOL)  # eval: dropout is the identity
    checks_shapes(report, model, (image,))


def test_mask_token_replaces_masked_positions_only():
    report, model = build_counted("""
name: m
inputs:
  image: [B, 3, 16, 16]
  mask: {shape: [B, 4, 4], dtype: int64}
graph:
  - {id: patch, from: image, patchify: {patch: 4, dim: 8}}
  - {id: masked, from: [patch, mask], mask_token: {}}
""")
    image, mask = torch.randn(2, 3, 16, 16), torch.randint(0, 2, (2, 4, 4))
    out, patches = model(image, mask), model.patch(image)
    hidden = mask.flatten(1).bool()
    assert torch.equal(out[~hidden], patches[~hidden])
    assert torch.equal(out[hidden], model.masked.token[0, 0].expand(int(hidden.sum()), -1))
    with pytest.raises(archspec.SpecError, match="does not lie on these tokens"):
        archspec.check_text("""
name: m
inputs:
  image: [B, 3, 16, 16]
  mask: {shape: [B, 8, 8], dtype: int64}
graph:
  - {id: patch, from: image, patchify: {patch: 4, dim: 8}}
  - {id: masked, from: [patch, mask], mask_token: {}}
""")


def test_rms_norm_and_layer_scale():
    report, model = build_counted(TOKENS + """
  - {id: n, from: x, norm: {kind: rms, eps: 1.0e-6}}
  - {id: mlp, mlp: {hidden: 16, norm_kind: rms, layer_scale: 0.5}}
""")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    x = torch.randn(2, 6, 8)

    def rms(t, weight, eps):
        return weight * (t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps))

    n = rms(x, model.n.weight, 1e-6)
    branch = model.mlp.fc2(F.gelu(model.mlp.fc1(rms(n, model.mlp.norm.weight, 1e-5))))
    expected = n + model.mlp.layer_scale.gamma * branch
    assert torch.allclose(model(x, torch.randn(2, 6, 8)), expected, atol=TOL)
    assert report.graph.node("mlp").meta["cost"].params == 8 + 8 * 16 + 16 + 16 * 8 + 8 + 8  # rms + fc1 + fc2 + ls


def test_gated_mlp_is_swiglu():
    _, model = build_counted(TOKENS + "  - {id: mlp, from: x, mlp: {hidden: 12, act: silu, gated: true, bias: false, "
                              "norm: none}}\n")
    x = torch.randn(2, 6, 8)
    gate, up = model.mlp.fc1.weight[:12], model.mlp.fc1.weight[12:]
    expected = x + F.silu(x @ gate.t()) * (x @ up.t()) @ model.mlp.fc2.weight.t()
    assert torch.allclose(model(x, x), expected, atol=TOL)


# -- attention options, against attention written out -------------------------------------------------


def reference_attention(x, model, heads, kv_heads, hidden=None, rope=None, qk_norm=None):
    """softmax(q k^T / sqrt(d) + mask) v, from the node's weights, with the options done by hand."""
    B, L, C = x.shape
    d = C // heads
    q, k, v = (x @ model.qkv.weight.t()).split([C, d * kv_heads, d * kv_heads], dim=-1)
    q = q.reshape(B, L, heads, d).transpose(1, 2)
    k = k.reshape(B, L, kv_heads, d).transpose(1, 2)
    v = v.reshape(B, L, kv_heads, d).transpose(1, 2)
    if qk_norm:
        q, k = qk_norm(q, model.q_norm), qk_norm(k, model.k_norm)
    if rope:
        q, k = rope(q), rope(k)
    k = k.repeat_interleave(heads // kv_heads, dim=1)  # query head h uses key/value head h // group
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    if hidden is not None:
        scores = scores.masked_fill(hidden, float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, C)
    return out @ model.proj.weight.t() + model.proj.bias


def rotate(t, dims, theta):
    """Rotary embedding, rotate-half convention: dim i pairs with i + dims/2 over the first dims."""
    L = t.shape[-2]
    inv = theta ** (-torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    angles = torch.arange(L, dtype=torch.float64)[:, None] * inv[None]  # [L, dims/2]
    cos, sin = angles.cos().float(), angles.sin().float()
    a, b, rest = t[..., : dims // 2], t[..., dims // 2: dims], t[..., dims:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)


@pytest.mark.parametrize("kind, mask", [("global", None), ("causal", "causal"), ("sliding", "sliding")])
def test_sequence_attention_with_gqa_rope_and_padding(kind, mask):
    window = ", window: 3" if kind == "sliding" else ""
    _, model = build_counted(f"""
name: a
dims: {{L: [1, 16]}}
inputs:
  x: [B, L, 16]
  pad: {{shape: [B, L], dtype: int64}}
graph:
  - id: attn
    from: [x, pad]
    attention: {{kind: {kind}, heads: 4, kv_heads: 2, rope_theta: 100.0, rope_dims: 2, padding_mask: true,
                qkv_bias: false, norm: none{window}}}
""")
    x = torch.randn(2, 7, 16)
    pad = torch.ones(2, 7, dtype=torch.long)
    pad[1, 5:] = 0  # the second sequence has two padded keys
    i, j = torch.arange(7)[:, None], torch.arange(7)[None, :]
    hidden = (pad == 0)[:, None, None, :]
    if mask == "causal":
        hidden = hidden | (j > i)
    if mask == "sliding":
        hidden = hidden | (j > i) | (j <= i - 3)
    expected = x + reference_attention(x, model.attn, 4, 2, hidden, rope=lambda t: rotate(t, 2, 100.0))
    with torch.no_grad():
        assert torch.allclose(model(x, pad), expected, atol=TOL)


def test_qk_norm_and_qv_biases():
    _, model = build_counted("""
name: a
inputs:
  x: [B, 5, 16]
graph:
  - id: attn
    attention: {kind: global, heads: 2, qk_norm: layer, qkv_bias: qv, norm: none}
""")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    x = torch.randn(2, 5, 16)
    attn = model.attn
    bias = torch.cat([attn.q_bias, torch.zeros(16), attn.v_bias])  # no key bias
    B, L, C = x.shape
    q, k, v = (x @ attn.qkv.weight.t() + bias).split(16, dim=-1)
    q, k, v = (t.reshape(B, L, 2, 8).transpose(1, 2) for t in (q, k, v))
    q = F.layer_norm(q, (8,), attn.q_norm.weight, attn.q_norm.bias, 1e-6)
    k = F.layer_norm(k, (8,), attn.k_norm.weight, attn.k_norm.bias, 1e-6)
    out = ((q @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1) @ v).transpose(1, 2).reshape(B, L, C)
    expected = x + out @ attn.proj.weight.t() + attn.proj.bias
    with torch.no_grad():
        assert torch.allclose(model(x), expected, atol=TOL)


def test_causal_attention_over_image_patches_needs_saying_so():
    spec = GRID + "  - attention: {kind: causal, heads: 2}\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(spec)
    assert info.value.message.startswith("causal attention orders tokens in a sequence, and these tokens lie on a "
                                         "4x4 grid")
    assert archspec.check_text(spec.replace("heads: 2}", "heads: 2, over_grid: true}")).params > 0


def test_token_type_embeddings_and_the_pooler():
    _, model = build_counted("""
name: b
inputs:
  ids: {shape: [B, 6], dtype: int64}
  types: {shape: [B, 6], dtype: int64}
graph:
  - {id: embed, from: [ids, types], embed: {vocab: 50, dim: 8, pos: learned, max_len: 6, types: 2}}
  - {id: pool, head: {kind: pooler}}
outputs: [embed, pool]
""")
    ids, types = torch.randint(0, 50, (2, 6)), torch.randint(0, 2, (2, 6))
    embedded, pooled = model(ids, types)
    table, positions, type_table = model.embed.tokens.weight, model.embed.pos.weight, model.embed.types.weight
    assert torch.allclose(embedded, table[ids] + type_table[types] + positions[:6], atol=TOL)
    assert torch.allclose(pooled, torch.tanh(embedded[:, 0] @ model.pool.fc.weight.t() + model.pool.fc.bias), atol=TOL)


def test_distilled_head_averages_in_eval_and_gives_both_in_training():
    _, model = build_counted(GRID.replace("dim: 8}", "dim: 8, cls_token: 2}") + "  - {id: head, head: {kind: distilled, "
                                                                     "classes: 3}}\n")
    image = torch.randn(2, 3, 16, 16)
    tokens = model.patch(image)
    cls, dist = model.head.fc(tokens[:, 0]), model.head.fc_dist(tokens[:, 1])
    assert torch.allclose(model(image), (cls + dist) / 2, atol=TOL)
    model.train()
    both = model(image)
    assert isinstance(both, tuple) and torch.allclose(both[1], dist, atol=TOL)


def test_objectives_give_the_loss_and_change_no_parameter_or_flop():
    network = GRID + """
  - {id: grid_img, to_image: {}}
  - {id: rec, head: {kind: reconstruct, stride: 4}}
"""
    plain = archspec.check_text(network)
    text = network.replace("  image: [B, 3, 16, 16]\n", "  image: [B, 3, 16, 16]\n  mask: {shape: [B, 4, 4], "
                                                           "dtype: int64}\n") + """
outputs: [rec]
objectives:
  - {id: l1, from: [rec, image, mask], loss: {kind: masked_l1}}
"""
    report, model = build_counted(text)
    assert (report.params, report.flops) == (plain.params, plain.flops)
    image, mask = torch.randn(2, 3, 16, 16), torch.randint(0, 2, (2, 4, 4))
    prediction = model(image, mask)
    pixels = mask.repeat_interleave(4, 1).repeat_interleave(4, 2)[:, None].float()  # [B, 1, 16, 16]
    expected = ((prediction - image).abs() * pixels).sum() / (pixels.sum() + 1e-5) / 3
    assert torch.allclose(model.loss(image, mask), expected, atol=TOL)


def test_a_loss_in_the_graph_or_a_target_read_by_the_network_is_refused():
    with pytest.raises(archspec.SpecError, match="a `loss` node belongs under `objectives`"):
        archspec.check_text(TOKENS + "  - {from: [x, y], loss: {kind: cross_entropy}}\n")
    with pytest.raises(archspec.SpecError, match="'labels' is a training target: only objectives read targets"):
        archspec.check_text(TOKENS + "  - {from: [x, labels], add: {}}\ntargets:\n  labels: [B, 6, 8]\n")


def test_example_inputs_respect_what_each_integer_input_may_hold():
    report = archspec.check_text("""
name: e
inputs:
  ids: {shape: [B, 9], dtype: int64}
  pad: {shape: [B, 9], dtype: int64}
graph:
  - {id: embed, from: ids, embed: {vocab: 7, dim: 8, pos: none}}
  - {from: [embed, pad], attention: {kind: global, heads: 2, padding_mask: true}}
""")
    ids, pad = example_inputs(report.graph, batch=64)
    assert int(ids.max()) == 6 and int(pad.max()) == 1  # the vocabulary, and a 0/1 mask
