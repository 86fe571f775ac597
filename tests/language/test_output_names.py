"""An output named as a method of the outputs (`keys`: the SAM decoder trial's two-way
transformer returns queries and keys) is read as out["keys"]; out.keys is the method. The check
warns, naming both; the names it knows are the methods ModelOutput really has."""

from __future__ import annotations

import torch

import archspec
from archspec.compiler.model import ModelOutput
from archspec.core.ir import OUTPUT_METHODS

SPEC = """
name: two_streams
inputs: {x: [B, 8, 32]}
graph:
  - {id: a, attention: {kind: global, heads: 2}}
  - {id: b, mlp: {ratio: 2}}
outputs: {queries: a, NAME: b}
"""


def test_an_output_named_keys_is_a_located_warning_and_reads_by_name():
    report = archspec.check_text(SPEC.replace("NAME", "keys"))
    (warned,) = [w for w in report.warnings if "named as a method" in w.message]
    assert "out.keys gives the method" in warned.message and warned.loc.line == 7
    out = archspec.build_text(SPEC.replace("NAME", "keys")).eval()(torch.randn(1, 8, 32))
    assert callable(out.keys) and out["keys"].shape == (1, 8, 32)


def test_other_names_are_not_warned():
    report = archspec.check_text(SPEC.replace("NAME", "key_tokens"))
    assert not [w for w in report.warnings if "named as a method" in w.message]


def test_the_names_warned_are_the_outputs_methods():
    out = ModelOutput((torch.zeros(1),), ("a",))
    assert all(callable(getattr(out, name)) for name in OUTPUT_METHODS)


def test_an_objective_reads_an_output_whose_path_is_an_expression():
    """`outputs: {y: "${'enc.b' if deep else 'enc.a'}"}` read by an objective was looked up
    unevaluated ("unknown node '${'enc'", the WavLM trial); it is the node the output names."""
    spec = """
name: t
params: {deep: false}
inputs: {x: [B, 8, 16]}
graph:
  - id: enc
    graph:
      - {id: a, linear: {dim: 16}}
      - {id: b, linear: {dim: 16}}
outputs:
  y: "${'enc.b' if deep else 'enc.a'}"
targets: {t: [B, 8, 16]}
objectives:
  - {id: l, from: [y, t], loss: {kind: mse}}
"""
    for deep, node in ((False, "enc.a"), (True, "enc.b")):
        graph = archspec.check_text(spec.replace("deep: false", f"deep: {str(deep).lower()}")).graph
        assert graph.inputs_of("objectives.l")[0] == node
