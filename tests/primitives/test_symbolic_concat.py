"""concat joins tokens of a symbolic length: image tokens before a text of any length (GIT,
ViLT), [B, 16, C] and [B, L, C] -> [B, 16+L, C], and their padding masks along axis 1. Both
trials had to fix the text length ("concat along tokens needs fixed lengths", no hint); GIT's
spec written this way matched GitForCausalLM at lengths 3, 7 and 12 (1.2e-7 to 2.4e-7)."""

from __future__ import annotations

import torch

import archspec
from archspec.compiler.backends.export import example_inputs, export_program

SPEC = """
name: prefix_and_text
dims: {L: [1, 32]}
inputs:
  image: [B, 3, 16, 16]
  input_ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
graph:
  - {id: patches, from: image, patchify: {patch: 4, dim: 32}}
  - {id: text, from: input_ids, embed: {vocab: 50, dim: 32, pos: none}}
  - {id: seq, from: [patches, text], concat: {}}
  - {id: seen, constant: {shape: [16], fill: ones}}
  - {id: seen_ids, cast: {dtype: int64}}
  - {id: image_mask, from: [seen_ids, input_ids], expand: {shape: [B, 16]}}
  - {id: mask, from: [image_mask, attention_mask], concat: {along: 1}}
  - {id: attn, from: [seq, mask], attention: {kind: global, heads: 2, padding_mask: true}}
  - {id: head, head: {kind: lm, vocab: 50}}
"""


def test_the_joined_length_is_the_sum_and_the_model_runs_at_every_length():
    report = archspec.check_text(SPEC)
    assert str(report.graph.type_of("seq").shape[1]) == "L+16" and report.graph.type_of("seq").shape[1].hi == 48
    assert str(report.graph.type_of("mask").shape[1]) == "L+16"
    torch.manual_seed(0)
    model = archspec.build_text(SPEC).eval()
    image = torch.randn(2, 3, 16, 16)
    for length in (3, 9):
        ids = torch.randint(0, 50, (2, length))
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, -1] = 0
        fixed = archspec.build_text(SPEC.replace("dims: {L: [1, 32]}", "").replace("L]", f"{length}]")).eval()
        fixed.load_state_dict(model.state_dict())
        with torch.no_grad():
            out = model(image, ids, mask)
            assert out.shape == (2, 16 + length, 50)
            assert torch.equal(out, fixed(image, ids, mask))


def test_the_program_takes_every_length():
    torch.manual_seed(0)
    model = archspec.build_text(SPEC).eval()
    graph = archspec.check_text(SPEC).graph
    program = export_program(model, graph).module()
    for length in (2, 17):
        args = example_inputs(graph, batch=3, lengths={"L": length})
        with torch.no_grad():
            assert (program(*args) - model(*args)).abs().max() < 1e-5


def test_learned_tokens_go_before_a_text_of_any_length():
    spec = """
name: cls_text
dims: {L: [1, 16]}
inputs: {input_ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: 20, dim: 16, pos: none}}
  - {id: cls, tokens: {count: 1}}
  - {id: attn, attention: {kind: global, heads: 2}}
"""
    length = archspec.check_text(spec).graph.type_of("attn").shape[1]
    assert (str(length), length.lo, length.hi) == ("L+1", 2, 17)
    model = archspec.build_text(spec).eval()
    ids = torch.randint(0, 20, (2, 5))
    with torch.no_grad():
        out = model(ids)
    assert out.shape == (2, 6, 16)
    fixed = archspec.build_text(spec.replace("dims: {L: [1, 16]}\n", "").replace("[B, L]", "[B, 5]")).eval()
    fixed.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(out, fixed(ids))
