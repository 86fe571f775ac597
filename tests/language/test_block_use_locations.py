"""An error about a value a block reads from its argument (`heads: ${heads}`) points at the
value the block's use gave (`myblock: {heads: 5}`), the line the user changes; the message
says where the block reads it. Several trials were told the block's line instead."""

from __future__ import annotations

import pytest

import archspec
from archspec.core.errors import SpecError

SPEC = """
name: t
inputs: {x: [B, 8, 64]}
blocks:
  inner:
    params: {heads: ~, ratio: 4.0}
    graph:
      - {id: attn, attention: {kind: global, heads: "${heads}"}}
      - {id: mlp, mlp: {ratio: "${ratio}"}}
  outer:
    params: {h: ~}
    graph:
      - {id: body, inner: {heads: "${h}"}}
graph:
  - {id: good, inner: {heads: 4}}
  - {id: bad, USE}
"""


def errors(use: str):
    text = SPEC.replace("USE", use)
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    lines = text.splitlines()
    return [(lines[d.loc.line - 1], lines[d.loc.line - 1][d.loc.col - 1:], d) for d in info.value.diagnostics]


def test_a_shape_error_points_at_the_argument_the_use_gave():
    [(line, at, d)] = errors("inner: {heads: 5}")
    assert "bad, inner: {heads: 5}" in line and at.startswith("5}")
    assert d.path == "bad.attn"
    assert "5 heads do not divide the width 64" in d.message
    assert d.message.endswith("(read as ${heads} of block `inner` at <spec>:8)")


def test_a_parameter_error_points_at_the_argument_the_use_gave():
    [(line, at, d)] = errors("inner: {heads: 4, ratio: -1}")
    assert at.startswith("-1}") and "ratio` must be greater than 0" in d.message


def test_a_nested_use_is_followed_out_to_the_value_written():
    [(line, at, d)] = errors("outer: {h: 6}")
    assert at.startswith("6}") and d.path == "bad.body.attn"
    assert d.message.endswith("(read as ${heads} of block `inner` at <spec>:8, given as ${h} of block `outer` "
                              "at <spec>:13)")


def test_a_value_computed_inside_the_block_stays_there():
    text = SPEC.replace('heads: "${heads}"', 'heads: "${heads + 1}"').replace("USE", "inner: {heads: 4}")
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    [d] = info.value.diagnostics
    assert d.loc.line == 8 and "read as" not in d.message


def test_a_default_the_use_did_not_give_stays_in_the_block():
    text = SPEC.replace("ratio: 4.0", "ratio: -2.0").replace("USE", "inner: {heads: 4}")
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    assert {d.loc.line for d in info.value.diagnostics} == {9}
    assert all("read as" not in d.message for d in info.value.diagnostics)
