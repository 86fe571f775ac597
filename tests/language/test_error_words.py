"""Errors the trials of this round found wanting, each now located where the mistake is and
saying what to do:

- `norm: post_res` was told "did you mean 'post'?", which builds another network; the name of the
  same words in another order comes first (res_post);
- a block parameter used as an `if:` and given an integer at the use (`cross: "${i % 2}"`, the
  Q-Former trial) was reported inside the block, once per copy; now at the use;
- a repeated node's own index in its `from:` and a caller's index inside a block were "unknown
  name 'i'" with a list of params; now each says why (the SAM decoder and Q-Former trials);
- a cross attention whose `kdim` is given but wrong was told to declare `kdim`."""

from __future__ import annotations

import pytest

import archspec
from archspec.core.errors import SpecError


def first_error(text: str):
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    return info.value.diagnostics[0], text.splitlines()


def test_the_same_words_in_another_order_come_first():
    d, _ = first_error("""
name: t
inputs: {x: [B, 8, 32]}
graph:
  - {id: attn, attention: {kind: global, heads: 2, norm: post_res}}
""")
    assert d.hint == "did you mean 'res_post'?"


def test_a_block_parameter_used_as_a_condition_is_refused_where_the_use_gives_it():
    d, lines = first_error("""
name: t
inputs: {x: [B, 8, 32]}
blocks:
  layer:
    params: {cross: ~}
    graph:
      - {id: attn, attention: {kind: global, heads: 2}}
      - {id: extra, if: "${cross}", mlp: {ratio: 2}}
graph:
  - {id: layers, repeat: 2, layer: {cross: "${i % 2}"}}
""")
    assert d.message.startswith("block parameter `cross` is a condition (`if: ${cross}`, line 9)")
    assert "layer: {cross:" in lines[d.loc.line - 1]


def test_a_repeated_nodes_own_index_in_its_from_says_why():
    d, _ = first_error("""
name: t
inputs: {x: [B, 8, 32]}
graph:
  - {id: first, attention: {kind: global, heads: 2}}
  - {id: layers, repeat: 3, from: "${'first' if i == 0 else 'x'}", mlp: {ratio: 2}}
""")
    assert d.message == "unknown name 'i'" and "read once, by its first copy" in d.hint


def test_a_callers_index_inside_a_block_says_blocks_see_their_params():
    d, _ = first_error("""
name: t
inputs: {x: [B, 8, 32]}
blocks:
  layer:
    graph:
      - {id: a, attention: {kind: global, heads: "${2 + i}"}}
graph:
  - {id: more, repeat: 2, layer: {}}
""")
    assert "a block sees its own params and the spec's" in d.hint and "`layer: {i: ${i}}`" in d.hint


def test_a_wrong_kdim_is_told_its_value():
    d, lines = first_error("""
name: t
inputs: {x: [B, 8, 32], memory: [B, 10, 48]}
graph:
  - {id: cross, from: [x, memory], attention: {kind: cross, heads: 2, kdim: 40}}
""")
    assert d.message.endswith("memory width 48 differs from kdim 40") and d.hint == (
        "set `kdim: 48`, the width of the memory `from:` gives")
    assert "kdim: 40" in lines[d.loc.line - 1]


def test_window_on_global_attention_names_the_window_both_ways():
    """The T5Gemma trial was told `window` belongs to kind sliding, which is causal: its encoder
    would have become causal without a word."""
    d, _ = first_error("""
name: t
inputs: {x: [B, 8, 32]}
graph:
  - {id: attn, attention: {kind: global, heads: 2, window: 4}}
""")
    assert "sliding is causal" in d.hint and "local_window" in d.hint


def test_a_local_window_on_cross_attention_is_refused():
    """It checked and built, and generate then refused it with words about causal attention."""
    d, _ = first_error("""
name: t
inputs: {x: [B, 8, 32], m: [B, 8, 32]}
graph:
  - {id: attn, from: [x, m], attention: {kind: cross, heads: 2, scores: [{local_window: {window: 4}}]}}
""")
    assert "cross attention's keys are another sequence's" in d.message


@pytest.mark.parametrize("word,kind", [("local", "sliding"), ("decoder", "causal"), ("bidirectional", "global")])
def test_another_librarys_name_of_a_kind_is_told_that_kind(word, kind):
    """GPT-Neo's `kind: local` was told "did you mean 'global'?": bidirectional attention, a model
    that builds and runs and is not GPT-Neo (the GPT-Neo trial)."""
    d, _ = first_error(f"""
name: t
inputs: {{ids: {{shape: [B, 8], dtype: int64}}}}
graph:
  - {{embed: {{vocab: 10, dim: 8}}}}
  - {{attention: {{kind: {word}, heads: 2}}}}
""")
    assert d.message.endswith(f"unknown kind '{word}' of attention") and d.hint.endswith(f"here `kind: {kind}`")


def test_a_comparison_spelt_as_other_languages_spell_it_is_told_its_meaning():
    """`op: lte` was told "did you mean 'lt'?" (the PhiMoE trial): less than or equal is le."""
    d, _ = first_error("name: t\ninputs: {x: [B, 8, 4]}\ngraph:\n  - {compare: {op: lte, value: 1}}\n")
    assert d.hint == "did you mean 'le'?"


def test_an_output_that_names_a_node_switched_off_warns():
    """The RoFormer trial's `logits`, switched off by `if: false`, returned the hidden state under
    that name without a word."""
    report = archspec.check_text("""
name: t
params: {mlm: false}
inputs: {x: [B, 8, 16]}
graph:
  - {id: enc, mlp: {ratio: 2}}
  - {id: logits, if: "${mlm}", linear: {dim: 5}}
outputs: [logits]
""")
    (w,) = report.graph.warnings
    assert "output 'logits' names 'logits', which is switched off" in w.message and "reads, 'enc'" in w.message


def test_a_computed_int64_mask_is_told_why_it_is_not_a_mask():
    """The Decision Transformer trial's stacked mask, an int64 [B, 18] tensor, was told it "must be
    int64 [B, L]", which is what it looked like: the message now says it is a computed tensor."""
    d, _ = first_error("""
name: t
inputs:
  x: [B, 8, 16]
  mask: {shape: [B, 4], dtype: int64}
graph:
  - {id: column, from: mask, rearrange: {pattern: "b l -> b l 1"}}
  - {id: pairs, from: [column, column], concat: {along: -1}}
  - {id: doubled, rearrange: {pattern: "b l t -> b (l t)"}}
  - {from: [x, doubled], attention: {kind: global, heads: 2, padding_mask: true}}
""")
    assert "got a rank-2 tensor [B, 8] int64 (a computed tensor" in d.message
    assert d.hint.startswith("`compare: {op: ne, value: 0, dtype: int64}`")


def test_a_float_mask_input_is_told_to_be_declared_int64():
    """The Starcoder2 trial declared its mask float32 (as Hugging Face's attention_mask is often
    passed): the hint says to declare it int64 first; a computed int64 tensor is told `compare`."""
    d, _ = first_error("""
name: t
inputs:
  x: [B, 8, 16]
  mask: [B, 8]
graph:
  - {from: [x, mask], attention: {kind: global, heads: 2, padding_mask: true}}
""")
    assert d.message.startswith("the padding mask must be int64 0/1 values [B, L]")
    assert d.hint.startswith("declare the mask input `{shape: [B, L], dtype: int64}`")


def test_an_undeclared_length_is_told_where_dims_are_declared():
    """The GPTBigCode trial's `[B, L]` without `dims:` was told "no params are defined"."""
    d, _ = first_error("name: t\ninputs:\n  ids: {shape: [B, L], dtype: int64}\ngraph:\n  - {embed: {vocab: 10, dim: 8}}\n")
    assert d.message == "unknown name 'L'" and d.hint.startswith("a symbolic size is declared under `dims` (L:")


def test_a_sliding_window_over_the_whole_sequence_warns():
    """The GPT-Neo trial's window 100 over sequences of 64 passed without a word: the layer is
    plain causal attention."""
    text = ("name: t\ndims: {L: [1, 64]}\ninputs: {ids: {shape: [B, L], dtype: int64}}\ngraph:\n"
            "  - {embed: {vocab: 10, dim: 8, pos: none}}\n  - {attention: {kind: sliding, heads: 2, window: WINDOW}}\n")
    (warning,) = archspec.check_text(text.replace("WINDOW", "100")).graph.warnings
    assert warning.message.startswith("window 100 covers every token of sequences up to 64")
    assert not archspec.check_text(text.replace("WINDOW", "16")).graph.warnings


def test_a_choice_in_other_letters_case_is_told_the_choice():
    """The Pegasus trial's `act: reLU` got no did-you-mean."""
    d, _ = first_error("name: t\ninputs: {x: [B, 4, 8]}\ngraph:\n  - {activation: {fn: reLU}}\n")
    assert d.hint == "did you mean 'relu'?"


@pytest.mark.parametrize("node, hint", [
    ("attention: {kind: causal, heads: 2, residual_multiplier: 0.2}", "is `branch_scale: <it>` here"),
    ("mlp: {ratio: 2, residual_multiplier: 0.2}", "is `branch_scale: <it>` here"),
    ("attention: {kind: causal, heads: 2, attention_multiplier: 0.1}", "(Granite) is `scale: <it>`"),
    ("attention: {kind: causal, heads: 2, query_pre_attn_scalar: 256}", "is `scale: ${<it> ** -0.5}`"),
    ("head: {kind: lm, vocab: 10, logits_scaling: 8}", "is `logits_divisor: <it>`"),
])
def test_hugging_faces_multiplier_names_point_at_the_options(node, hint):
    """The Granite trial's residual_multiplier was offered residual_gate, logits_scaling
    logits_softcap (which built, 5.78 off), attention_multiplier a list of every key."""
    d, _ = first_error(f"name: t\ninputs: {{x: [B, 8, 16]}}\ngraph:\n  - {{{node}}}\n")
    assert hint in d.hint and "did you mean" not in d.hint
