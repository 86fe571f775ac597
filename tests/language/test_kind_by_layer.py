"""One node whose kind changes by layer: an option whose value is none is left out where the
node's kind does not take it (`window: "${window if i % 2 == 0 else None}"` beside `kind:
"${'sliding' if i % 2 == 0 else 'causal'}"`), so Gemma 2's or GPT-OSS's layer_types need one node,
not two alternatives sharing an id. The one-node form must build the very model the two-node
form builds (the same weights give the same logits past the window, where a layer that lost its
window would differ), and a none option that no kind takes is still refused."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

HEAD = """
archspec: 1
name: kind_by_layer
params: {window: 4}
inputs:
  x: [B, 12, 32]
graph:
  - id: layers
    repeat: 4
    graph:
"""

ONE_NODE = HEAD + """\
      - id: attn
        attention: {kind: "${'sliding' if i % 2 == 0 else 'causal'}", window: "${window if i % 2 == 0 else None}",
                    heads: 2, rope_theta: "${None if i == 3 else 10000.0}"}
      - {id: mlp, mlp: {ratio: 2}}
"""

TWO_NODES = HEAD + """\
      - id: attn
        if: ${i % 2 == 0}
        attention: {kind: sliding, window: "${window}", heads: 2, rope_theta: 10000.0}
      - id: attn
        if: ${i % 2 == 1}
        attention: {kind: causal, heads: 2, rope_theta: "${None if i == 3 else 10000.0}"}
      - {id: mlp, mlp: {ratio: 2}}
"""

ALL_CAUSAL = TWO_NODES.replace("kind: sliding, window: \"${window}\"", "kind: causal")


def built(text: str, tmp_path, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return archspec.create_model(str(path)).eval()


def test_one_node_alternating_kinds_is_the_two_node_model(tmp_path):
    torch.manual_seed(0)
    one, two, causal = (built(t, tmp_path, n) for t, n in
                        ((ONE_NODE, "one"), (TWO_NODES, "two"), (ALL_CAUSAL, "causal")))
    state = two.state_dict()
    assert set(one.state_dict()) == set(state)
    one.load_state_dict(state)
    causal.load_state_dict(state)
    x = torch.randn(2, 12, 32)
    with torch.no_grad():
        assert torch.equal(one(x), two(x))
        assert (causal(x) - two(x)).abs().max() > 1e-3  # the windows matter at 12 tokens


def test_a_none_option_no_kind_takes_is_still_refused(tmp_path):
    text = ONE_NODE.replace('window: "${window if', 'windw: "${window if')
    with pytest.raises(SpecError, match="windw"):
        built(text, tmp_path, "misspelt")


def test_a_none_option_the_kind_takes_is_given_to_it(tmp_path):
    text = ONE_NODE.replace('window: "${window if i % 2 == 0 else None}"', "window: ~")
    with pytest.raises(SpecError, match="window"):  # sliding needs its window: none is not left out
        built(text, tmp_path, "sliding_without_window")


def test_an_option_none_where_its_field_takes_no_none_keeps_its_default():
    """`res_post_init: "${'ones' if swin else None}"` was "must be 'zeros' or 'ones'; got nothing"
    (the Chameleon trial; OLMo 3's rope_original_length on some layers only): none leaves the
    option out, so its default holds, and the layers that give it get it."""
    spec = """
name: t
params: {swin: false}
inputs: {x: [B, 8, 32]}
graph:
  - id: attn
    attention: {kind: causal, heads: 2, norm: "${'res_post' if swin else 'pre'}",
                res_post_init: "${'ones' if swin else None}"}
"""
    plain = archspec.check_text(spec).graph.node("attn").params
    swin = archspec.check_text(spec.replace("swin: false", "swin: true")).graph.node("attn").params
    assert plain.norm == "pre" and "res_post_init" not in plain.model_fields_set
    assert swin.norm == "res_post" and swin.res_post_init == "ones"


def test_none_for_an_option_that_also_takes_none_is_refused():
    """The EXAONE 4 trial: `norm: "${'res_post' if post else None}"` built the default pre-norm
    where no norm was meant (16,768 parameters against 16,640), without a word; None there is
    refused, 'none' and the default written out are taken."""
    spec = """
name: t
params: {post: false}
inputs: {x: [B, 8, 32]}
graph:
  - attention: {kind: causal, heads: 2, norm: "${'res_post' if post else NORM}"}
"""
    with pytest.raises(SpecError, match="`norm` is None here .from an expression., which keeps its default, 'pre'"):
        archspec.check_text(spec.replace("NORM", "None"))
    with_none, pre = (archspec.check_text(spec.replace("NORM", word)).params for word in ("'none'", "'pre'"))
    assert pre - with_none == 2 * 32  # the LayerNorm's weight and bias
    assert archspec.check_text(spec.replace("NORM", "None"), {"post": True}).params > 0  # res_post given: no None
