"""The editor past errors (issue 39): hover works on every node that expands while another part
of the file has an error, and on params; go-to-definition on a name inside `${...}` goes to the
param (or the block parameter) it reads."""

from __future__ import annotations

import pytest

pytest.importorskip("pygls")

from archspec.lsp.analysis import analyse, definition, hover  # noqa: E402

TEXT = """\
archspec: 1
name: past_errors
params: {dim: 32, heads: 4}
inputs:
  x: [B, 8, "${dim}"]
blocks:
  layer:
    params: {heads: 2}
    graph:
      - {id: attn, attention: {kind: global, heads: "${heads}"}}
graph:
  - {id: attn, attention: {kind: global, heads: "${heads}"}}
  - {id: mlp, mlp: {ratio: 2}}
  - {id: typo, mlp: {ratoi: 2}}
  - {id: after, mlp: {ratio: 2}}
  - {id: block, layer: {}}
"""
LINES = TEXT.splitlines()


def at(piece: str, offset: int = 0, nth: int = 0) -> dict:
    rows = [i for i, line in enumerate(LINES) if piece in line]
    line = rows[nth]
    return {"line": line, "character": LINES[line].index(piece) + offset}


def test_hover_shows_the_nodes_that_expand_past_an_error_below():
    a = analyse(TEXT, "/tmp/past_errors.yaml")
    assert a.attempt.error is not None and a.attempt.graph is None  # the check fails before any IR
    shown = hover(a, **at("- {id: attn", 2, 1))
    assert shown.startswith("**attn**") and "output `[B, 8, 32]`" in shown and "params 4,288" in shown
    assert "output `[B, 8, 32]`" in hover(a, **at("- {id: mlp", 2))
    assert "not checked" in hover(a, **at("- {id: after", 2))


def test_definition_on_a_name_in_an_expression_goes_to_the_param():
    a = analyse(TEXT, "/tmp/past_errors.yaml")
    found = definition(a, **at("${heads}", 3, 1))  # the graph's node reads the spec's param
    assert (found.line, found.character) == (2, LINES[2].index("heads"))
    found = definition(a, **at("${heads}", 3, 0))  # inside the block: the block's parameter
    assert (found.line, found.character) == (7, LINES[7].index("heads"))
    found = definition(a, **at("${dim}", 3))
    assert (found.line, found.character) == (2, LINES[2].index("dim"))


def test_hover_on_a_param_shows_its_value():
    a = analyse(TEXT, "/tmp/past_errors.yaml")
    assert hover(a, **at("${heads}", 3, 1)) == "**heads** \u00b7 param\n\nvalue `4`"
    ok = analyse(TEXT.replace("ratoi", "ratio"), "/tmp/past_errors.yaml")
    assert ok.attempt.error is None
    assert hover(ok, **at("heads: 4", 1)) == "**heads** \u00b7 param\n\nvalue `4`"
    assert "parameter of block `layer`" in hover(ok, **at("${heads}", 3, 0))


def test_definition_on_weights_of_goes_to_the_node():
    text = TEXT.replace("  - {id: mlp, mlp: {ratio: 2}}\n", "  - {id: mlp, mlp: {ratio: 2}}\n"
                        "  - {id: mlp2, weights_of: mlp, mlp: {ratio: 2}}\n")
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if "weights_of: mlp" in line)
    found = definition(analyse(text, "/tmp/past_errors.yaml"), row, lines[row].index("weights_of: mlp") + 13)
    assert (found.line, found.character) == (next(i for i, line in enumerate(lines) if "{id: mlp," in line), 4)
