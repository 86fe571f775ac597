"""Nodes no output depends on: kept with their parameters (counted, in the state dict, loaded,
in model.py), never called by forward, their FLOPs not counted; `unused: true` says it is meant
(no warning), and is an error where an output does depend on the node. Four trials of stop 54
kept a reference's unused module for its parameters (Depth Anything's residual_layer1, the
Decision Transformer's token table, RoFormer's sinusoid table, TrOCR's pooler): each warned on
every check, and Depth Anything's ran in forward, 36,864 FLOPs more than the reference."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

SPEC = """name: spare_parts
inputs:
  x: [B, 8, 16]
graph:
  - {id: enc, mlp: {ratio: 2}}
  - id: spare
    unused: true
    graph:
      - {id: a, linear: {dim: 16}}
      - {id: b, linear: {dim: 4}}
  - {id: pool, from: enc, linear: {dim: 3}}
outputs: [pool]
"""


def test_an_unused_node_keeps_its_parameters_and_is_never_called(tmp_path):
    report = archspec.check_text(SPEC)
    assert report.graph.warnings == []  # `unused: true`: meant
    model = archspec.build_text(SPEC, seed=0)
    assert {"spare.a.weight", "spare.b.bias"} <= set(model.state_dict())
    assert sum(p.numel() for p in model.parameters()) == report.params
    calls = []
    for name in ("spare.a", "spare.b", "enc"):
        model.get_submodule(name).register_forward_hook(lambda m, args, out, name=name: calls.append(name))
    model(torch.randn(2, 8, 16))
    assert calls == ["enc"]
    rows = {row.path: row for row in report.nodes}
    assert report.flops == rows["enc"].flops + rows["pool"].flops  # the spare nodes' FLOPs are not run
    assert not rows["spare.a"].run and "not run" in report.table() and rows["enc"].run
    reloaded = archspec.build_text(SPEC, seed=1)
    reloaded.load_state_dict(model.state_dict())  # the same keys and shapes
    assert torch.equal(reloaded.get_submodule("spare.b").weight, model.get_submodule("spare.b").weight)


def test_a_node_without_the_mark_warns_and_is_not_called_either():
    text = SPEC.replace("    unused: true\n", "")
    (first, second) = archspec.check_text(text).graph.warnings
    assert first.message == "no output depends on this node" and "mark it `unused: true`" in first.hint
    model = archspec.build_text(text, seed=0)
    assert "spare" not in model.code and "spare.a.weight" in model.state_dict()


def test_an_unused_node_an_output_reads_is_an_error():
    with pytest.raises(SpecError, match="'spare' is marked `unused: true`, and an output depends on 'spare.a'"):
        archspec.check_text(SPEC.replace("outputs: [pool]", "outputs: [pool, spare]"))


def test_the_standalone_model_and_the_exported_program_keep_them(tmp_path):
    (tmp_path / "spare.yaml").write_text(SPEC)
    from archspec.cli.main import main

    assert main(["build", str(tmp_path / "spare.yaml"), "-o", str(tmp_path / "out")]) == 0
    source = (tmp_path / "out" / "model.py").read_text()
    assert "_install(self, 'spare.a'" in source


def test_an_unused_node_inside_a_group_that_runs_keeps_its_module():
    """LeViT's spec with its position bias left unread (a parity test's wrong variant): the table
    sat inside a block that runs, whose module fx built without it, and lowering failed."""
    text = """name: inner
inputs:
  x: [B, 8, 16]
blocks:
  layer:
    graph:
      - {id: table, param: {shape: [4, 8]}}
      - {id: mlp, from: x, mlp: {ratio: 2}}
    inputs: [x]
graph:
  - {id: blocks, repeat: 2, layer: {}}
"""
    model = archspec.build_text(text, seed=0)
    assert model.get_submodule("blocks.0.table").value.shape == (1, 4, 8)
    assert "blocks.1.table.value" in model.state_dict()
    assert model(torch.randn(2, 8, 16)).shape == (2, 8, 16)


ALTERNATIVES = """name: first_stage
params: {first: true}
inputs:
  x: [B, 8, 4, 4]
graph:
  - {id: r, if: "${first}", unused: UNUSED, conv: {kernel: 1}}
  - {id: r, if: "${not first}", conv: {kernel: 1}}
  - {id: summed, if: "${not first}", from: [x, r], add: {}}
  - {id: out, from: summed, conv: {kernel: 1}}
"""


def test_a_kept_alternative_may_be_marked_unused_by_an_expression():
    """The DPT trial: Depth Anything's first fusion stage keeps a residual unit it never runs,
    written as an alternative marked unused; check refused it ("computed, but no output reads
    it") and `unused: ${first}` was no true/false."""
    for flag in ("true", "\"${first}\""):
        report = archspec.check_text(ALTERNATIVES.replace("UNUSED", flag))
        assert report.graph.warnings == [] and not {row.path: row for row in report.nodes}["r"].run
    for unmarked in (ALTERNATIVES.replace("unused: UNUSED, ", ""), ALTERNATIVES.replace("UNUSED", "\"${not first}\"")):
        with pytest.raises(SpecError, match="the alternative kept under id 'r' is computed, but no output reads it"):
            archspec.check_text(unmarked)
    with pytest.raises(SpecError, match="`unused` must be true or false, got 3"):
        archspec.check_text(ALTERNATIVES.replace("UNUSED", "\"${3}\""))


BRANCHES = """
archspec: 1
name: branches
inputs:
  image: [B, 4, 8, 8]
graph:
  - {id: a, conv: {out: 4, kernel: 1}}
  - {id: b, conv: {out: 4, kernel: 1}}
  - id: lat
    repeat: 2
    as: i
    graph:
      - {id: c, UNUSED from: "${['a', 'b'][i]}", conv: {out: 4, kernel: 1}}
outputs: {o: lat.1}
"""


def test_copies_marked_unused_are_not_dead_copies():
    """The UperNet trial's parallel branches: a copy no output reads, marked `unused: ${i == 0}`
    as section 3.3 shows, was the dead-copies error all the same; unmarked it still is."""
    report = archspec.check_text(BRANCHES.replace("UNUSED", 'unused: "${i == 0}",'))
    assert report.params == 2 * 20 + 2 * 20
    with pytest.raises(SpecError, match="copy 0 of the 2 of the repeat 'lat' is built, but no output reads it"):
        archspec.check_text(BRANCHES.replace("UNUSED", ""))
