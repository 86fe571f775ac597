"""Attention written as a block of tensor ops in YAML: CaiT's talking-heads attention (heads
mixed by a learned matrix before and after the softmax) as linear, rearrange, einsum, scale,
param, add and softmax nodes, against timm's own `TalkingHeadAttn` with the same (perturbed)
weights; checked, costed, built, exported and run like any spec."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program

cait = pytest.importorskip("timm.models.cait")

DIM, HEADS, TOKENS = 32, 4, 10

SPEC = f"""
name: talking_heads
params: {{dim: {DIM}, heads: {HEADS}}}
inputs:
  x: [B, {TOKENS}, {DIM}]
blocks:
  split_heads:                    # [B, N, dim] -> [B, heads, N, dim / heads]
    graph:
      - rearrange: {{pattern: "b n (h d) -> b h n d", sizes: {{h: "${{heads}}"}}}}
graph:
  - {{id: q, from: x, linear: {{dim: "${{dim}}"}}}}
  - {{id: k, from: x, linear: {{dim: "${{dim}}"}}}}
  - {{id: v, from: x, linear: {{dim: "${{dim}}"}}}}
  - {{id: qh, from: q, split_heads: {{}}}}
  - {{id: kh, from: k, split_heads: {{}}}}
  - {{id: vh, from: v, split_heads: {{}}}}
  - {{id: scores, from: [qh, kh], einsum: {{eq: "b h i d, b h j d -> b h i j"}}}}
  - {{id: scaled, scale: {{factor: "${{(dim // heads) ** -0.5}}"}}}}
  - {{id: mix_l, param: {{shape: ["${{heads}}", "${{heads}}"]}}}}           # proj_l: heads mixed before softmax
  - {{id: mixed_l, from: [scaled, mix_l], einsum: {{eq: "b h i j, b g h -> b g i j"}}}}
  - {{id: bias_l, param: {{shape: ["${{heads}}", 1, 1]}}}}
  - {{id: logits, from: [mixed_l, bias_l], add: {{}}}}
  - {{id: probs, softmax: {{axis: -1}}}}
  - {{id: mix_w, param: {{shape: ["${{heads}}", "${{heads}}"]}}}}           # proj_w: and after it
  - {{id: mixed_w, from: [probs, mix_w], einsum: {{eq: "b h i j, b g h -> b g i j"}}}}
  - {{id: bias_w, param: {{shape: ["${{heads}}", 1, 1]}}}}
  - {{id: weights, from: [mixed_w, bias_w], add: {{}}}}
  - {{id: mixed, from: [weights, vh], einsum: {{eq: "b h i j, b h j d -> b h i d"}}}}
  - {{id: merged, rearrange: {{pattern: "b h n d -> b n (h d)", as: tokens}}}}
  - {{id: proj, linear: {{dim: "${{dim}}"}}}}
outputs: [proj]
"""


def reference():
    torch.manual_seed(0)
    ref = cait.TalkingHeadAttn(DIM, HEADS, qkv_bias=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # perturbed: no parameter keeps its initial value
    return ref


def archspec_weights(ref) -> dict:
    """timm's names -> the spec's nodes (qkv split in three; a head-mixing linear is a [H, H]
    matrix and a [H, 1, 1] bias)."""
    q, k, v = ref.qkv.weight.chunk(3)
    qb, kb, vb = ref.qkv.bias.chunk(3)
    return {"q.weight": q, "q.bias": qb, "k.weight": k, "k.bias": kb, "v.weight": v, "v.bias": vb,
            "mix_l.value": ref.proj_l.weight[None], "bias_l.value": ref.proj_l.bias.reshape(1, HEADS, 1, 1),
            "mix_w.value": ref.proj_w.weight[None], "bias_w.value": ref.proj_w.bias.reshape(1, HEADS, 1, 1),
            "proj.weight": ref.proj.weight, "proj.bias": ref.proj.bias}


@pytest.fixture(scope="module")
def built():
    ref = reference()
    report = archspec.check_text(SPEC)
    model = archspec.build_text(SPEC).eval()
    model.load_state_dict(archspec_weights(ref), strict=True)
    return ref, report, model


def test_talking_heads_as_tensor_ops_equals_timm(built):
    ref, report, model = built
    x = torch.randn(3, TOKENS, DIM)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-5, rtol=0)
    assert report.params == sum(p.numel() for p in ref.parameters())


def test_its_flops_are_what_flop_counter_counts(built):
    _, report, model = built
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, TOKENS, DIM))
    assert report.flops == counter.get_total_flops()


def test_it_exports_with_a_dynamic_batch(built):
    _, report, model = built
    program = export_program(model, report.graph)
    x = torch.randn(5, TOKENS, DIM)
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-5, rtol=0)
