"""Issue 37 #7 and #8: what check must know about dtypes and index ranges.

 7  int64 token ids reaching a float-only op are a located error at check: every op declares the
    dtypes it reads (the READS fact, archspec/primitives/dtypes.py); a rearrange `as: image` or
    `as: tokens` of ids changes the layout, not the dtype; an einsum reads floats.
 8  an index whose values can reach past the axis it indexes (an argsort of 40 positions used on
    16 tokens) is a located error at check: argsort, topk and `constant` fill: index carry the
    bound of their values.
"""

from __future__ import annotations

import pytest

import archspec
from archspec.core.errors import SpecError

IDS_AS_IMAGE = """\
name: ids_as_image
inputs:
  ids: {shape: [B, 16], dtype: int64}
graph:
  - {id: grid, from: ids, rearrange: {pattern: "b (c h w) -> b c h w", sizes: {c: 1, h: 4}, as: image}}
  - {id: bad, NODE}
"""

IDS_AS_TOKENS = """\
name: ids_as_tokens
inputs:
  ids: {shape: [B, 16], dtype: int64}
graph:
  - {id: seq, from: ids, rearrange: {pattern: "b (n c) -> b n c", sizes: {c: 4}, as: tokens}}
  - {id: bad, NODE}
"""

ON_IMAGE = ["conv: {out: 4, kernel: 1}", "patchify: {patch: 2, dim: 8, pos: none}", "norm: {kind: batch}",
            "resize: {size: 8}", "upsample: {factor: 2}"]
ON_TOKENS = ["attention: {kind: global, heads: 1}", "mlp: {ratio: 2.0}", "norm: {}",
             "head: {kind: classify, classes: 3}"]


def refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        archspec.check_text(text)
    return caught.value


@pytest.mark.parametrize("node", ON_IMAGE)
def test_ids_laid_out_as_an_image_are_not_floats(node):
    error = refused(IDS_AS_IMAGE.replace("NODE", node))
    (diag,) = error.diagnostics
    assert diag.path == "bad" and "reads floating-point values" in diag.message and "int64" in diag.message, diag
    assert diag.loc is not None and diag.loc.line == 6 and "embed" in diag.hint


@pytest.mark.parametrize("node", ON_TOKENS)
def test_ids_laid_out_as_tokens_are_not_floats(node):
    (diag,) = refused(IDS_AS_TOKENS.replace("NODE", node)).diagnostics
    assert diag.path == "bad" and "reads floating-point values" in diag.message and "'seq'" in diag.message, diag


def test_an_einsum_of_two_int64_inputs_is_refused_at_check():
    text = """\
name: int_einsum
inputs:
  a: {shape: [B, 8], dtype: int64}
  b: {shape: [B, 8], dtype: int64}
graph:
  - {id: outer, from: [a, b], einsum: {eq: "b i, b j -> b i j"}}
  - {id: probs, softmax: {axis: -1}}
"""
    (diag,) = refused(text).diagnostics
    assert diag.path == "outer" and "einsum reads floating-point values" in diag.message


def test_ids_into_an_embed_and_floats_after_check():
    archspec.check_text(IDS_AS_TOKENS.replace("  - {id: seq, from: ids, rearrange: {pattern: \"b (n c) -> b n c\", "
                                              "sizes: {c: 4}, as: tokens}}\n", "  - {id: seq, embed: {vocab: 10, "
                                              "dim: 8, pos: none}}\n").replace("NODE", "mlp: {ratio: 2.0}"))


def test_an_op_without_reads_is_an_error_naming_it():
    from archspec.core.errors import InternalError
    from archspec.primitives.base import NoParams, Op
    from archspec.primitives.facts import Fact

    class Lonely(Op):
        primitive = "lonely_fuzz_op"
        Params = NoParams

    fact = Fact("READS", "the dtypes", where="there")
    with pytest.raises(InternalError, match="lonely_fuzz_op has no READS registered"):
        fact.of(Lonely())


# -- 8: index ranges ------------------------------------------------------------------------------------------

INDEXED = """\
name: indexed
dims:
  L: [4, 32]
inputs:
  x: [B, 16, 8]
  noise: [B, SOURCE]
  y: [B, L, 8]
  ids: {shape: [B, 16], dtype: int64}
graph:
  - {id: order, from: noise, argsort: {}}
  - {id: bad, NODE}
"""


@pytest.mark.parametrize("source,node", [
    ("40", "from: [x, order], gather: {count: 8}"),                          # the case
    ("40", "from: [x, order, x], scatter: {count: 16}"),                     # 16 of 40 positions into 16 tokens
    ("40", "from: [order, order], gather: {count: 16}"),                               # 16 of them keep their range...
    ("40", "from: order, embed: {vocab: 16, dim: 8, pos: none}"),            # an embed's vocabulary, too
])
def test_an_index_that_can_reach_past_the_axis_is_refused_at_check(source, node):
    text = INDEXED.replace("SOURCE", source).replace("NODE", node)
    if "[order, order]" in node:  # 16 of the 40 positions: the gather after it is the one refused
        text += "  - {id: picked, from: [x, bad], gather: {}}\n"
    (diag,) = refused(text).diagnostics
    assert "may hold values up to 39" in diag.message and "0..15" in diag.message, diag
    assert diag.loc is not None and diag.loc.line >= 11


def test_topk_indices_carry_the_size_of_their_axis():
    text = INDEXED.replace("SOURCE", "40").replace("NODE", "from: noise, topk: {k: 4, output: indices}")
    (diag,) = refused(text + "  - {id: picked, from: [x, bad], gather: {}}\n").diagnostics
    assert diag.path == "picked" and "up to 39" in diag.message


@pytest.mark.parametrize("source,node", [
    ("16", "from: [x, order], gather: {count: 8}"),         # as many positions as tokens
    ("8", "from: [x, order], gather: {}"),                  # fewer
    ("L", "from: [y, order], gather: {}"),                  # the same symbolic length
    ("40", "from: [x, ids], gather: {}"),                   # ids from outside: nothing known, nothing refused
])
def test_indices_within_the_axis_pass(source, node):
    archspec.check_text(INDEXED.replace("SOURCE", source).replace("NODE", node))
