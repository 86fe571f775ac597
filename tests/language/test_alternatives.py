"""Alternatives: nodes sharing an id, of which `if` keeps one. Whatever reads the id, or the chain
after the alternatives, or a block's output when they are its last nodes, reads the kept node,
whichever place it has among them and whether or not the alternatives say `from:` (two user
trials built a model that dropped every local attention this way, silently)."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

FIRST_OF_TWO = """
archspec: 1
name: alternative_with_from
params: {first: true}
inputs:
  x: {shape: [B, 16, 32], grid: [4, 4]}
graph:
  - {id: attn, if: "${first}", FROM attention: {kind: global, heads: 2}}
  - {id: attn, if: "${not first}", FROM attention: {kind: window, heads: 2, window: 2}}
  - {id: mlp, mlp: {ratio: 2}}
"""

BLOCK_LAST_NODES = """
archspec: 1
name: block_alternatives_last_node
inputs:
  x: [B, 8, 32]
blocks:
  layer:
    params: {use_mlp: ~}
    graph:
      - {id: attn, attention: {kind: global, heads: 2}}
      - {id: mlp, if: "${use_mlp}", FROM mlp: {ratio: 2}}
      - {id: mlp, if: "${not use_mlp}", FROM mlp: {ratio: 4}}
graph:
  - {id: layers, repeat: 1, layer: {use_mlp: USE}}
"""


def spec(text: str, with_from: bool, source: str, **swap) -> str:
    text = text.replace("FROM ", f"from: {source}, " if with_from else "")
    for key, value in swap.items():
        text = text.replace(key, value)
    return text


def modules_called(model, x) -> list[str]:
    """The paths of the modules the forward calls, in order (hooks on every named submodule)."""
    called, hooks = [], []
    for path, module in model.named_modules():
        if path and "." not in path.replace("layers.0.", ""):
            hooks.append(module.register_forward_hook(lambda m, i, o, path=path: called.append(path)))
    try:
        model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return called


@pytest.mark.parametrize("with_from", [True, False], ids=["from", "chain"])
@pytest.mark.parametrize("first", [True, False], ids=["kept-first", "kept-last"])
def test_a_node_after_alternatives_reads_the_kept_one(first, with_from):
    report = archspec.check_text(spec(FIRST_OF_TWO, with_from, "x"), {"first": first})
    graph = report.graph
    kind = "global" if first else "window"
    assert graph.record("attn").op.label == f"attention/{kind}"
    assert graph.inputs_of("mlp") == ("attn",)
    assert not report.warnings
    model = archspec.build_text(spec(FIRST_OF_TWO, with_from, "x"), {"first": first})
    x = torch.randn(2, 16, 32)
    assert modules_called(model, x) == ["attn", "mlp"]
    expected = model.mlp(model.attn(x))
    assert torch.equal(model(x), expected)


@pytest.mark.parametrize("with_from", [True, False], ids=["from", "chain"])
@pytest.mark.parametrize("use_mlp", [True, False], ids=["kept-first", "kept-last"])
def test_a_block_whose_last_nodes_are_alternatives_returns_the_kept_one(use_mlp, with_from):
    text = spec(BLOCK_LAST_NODES, with_from, "attn", USE=str(use_mlp).lower())
    report = archspec.check_text(text)
    graph = report.graph
    assert [o.node for o in graph.outputs] == ["layers.0.mlp"]
    ratio = 2 if use_mlp else 4
    assert graph.record("layers.0.mlp").params.ratio == ratio
    assert not report.warnings
    model = archspec.build_text(text)
    x = torch.randn(2, 8, 32)
    block = model.layers[0]
    assert torch.equal(model(x), block.mlp(block.attn(x)))


def test_a_kept_alternative_that_nothing_reads_is_an_error():
    text = spec(FIRST_OF_TWO, True, "x").replace("{id: mlp, mlp", "{id: mlp, from: x, mlp")
    with pytest.raises(SpecError) as caught:
        archspec.check_text(text)
    problem = caught.value.diagnostics[0]
    assert "alternative kept under id 'attn'" in problem.message and "no output reads it" in problem.message
    assert problem.loc.line == 8 and problem.path == "attn"


def test_an_ordinary_skipped_node_still_passes_its_input_on():
    """`if: false` on a node with no alternative: it stands for what it reads (the documented rule)."""
    text = """
archspec: 1
name: skipped
inputs:
  x: [B, 8, 32]
graph:
  - {id: a, mlp: {ratio: 2}}
  - {id: b, if: false, from: x, mlp: {ratio: 4}}
  - {id: c, mlp: {ratio: 3}}
"""
    graph = archspec.check_text(text).graph
    assert graph.inputs_of("c") == ("x",)


def test_a_skipped_param_leaves_the_chain_to_the_node_before_it():
    """A skipped node that reads nothing is refused where a node names it (tests/bad_specs/
    skipped_param_read_by_name.yaml), but the next node without `from` still reads the node
    before it, and an alternative under the same id is taken as before."""
    spec = """
name: t
params: {use_bias: false}
inputs: {x: [B, 30, 32]}
graph:
  - {id: h, linear: {dim: 32}}
  - {id: bias, if: "${use_bias}", param: {shape: [30, 32], init: zeros}}
  - {id: bias, if: "${not use_bias}", constant: {shape: [30, 32]}}
  - {id: out, from: [h, bias], add: {}}
  - {id: skipped, if: false, param: {shape: [32]}}
  - {id: norm, norm: {}}
"""
    graph = archspec.check_text(spec).graph
    assert graph.inputs_of("out") == ("h", "bias") and graph.node("bias").op.primitive == "constant"
    assert graph.inputs_of("norm") == ("out",)


APART = """
archspec: 1
name: alternatives_apart
params: {post: true}
inputs: {x: [B, 4, 8]}
blocks:
  layer:
    inputs: [x]
    graph:
      - {id: ff, if: "${post}", mlp: {ratio: 2, residual: false, norm: none}}
      - {id: res, from: [x, ff], add: {}}
      - {id: ff, if: "${not post}", mlp: {ratio: 2}}
graph:
  - {id: l, layer: {}}
"""


def test_a_block_ending_with_an_alternative_apart_from_its_kept_twin_returns_its_last_node():
    """The PatchTST trial: a block whose last entry is a skipped alternative of a node kept two
    places before returned that node, dropping the residual add between them, with only a warning
    that nothing reads the add. A skipped alternative apart from its kept twin stands for its
    input, as any skipped node, so the block returns the add."""
    report = archspec.check_text(APART)
    assert [o.node for o in report.graph.outputs] == ["l.res"]
    assert not report.warnings
    model = archspec.build_text(APART).eval()
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        assert torch.equal(model(x), x + model.l.ff(x))
    with pytest.raises(SpecError) as caught:  # the other way round the add reads the mlp kept after it
        archspec.check_text(APART, {"post": False})
    assert "cycle: l.res -> l.ff -> l.res" in caught.value.diagnostics[0].message


def test_alternatives_around_a_node_reorder_it():
    """Pre-norm or post-norm by where the kept norm stands: each order reads as written."""
    text = """
archspec: 1
name: reorder
params: {pre: true}
inputs: {x: [B, 4, 8]}
graph:
  - {id: n, if: "${pre}", norm: {}}
  - {id: attn, attention: {kind: global, heads: 2, norm: none}}
  - {id: n, if: "${not pre}", norm: {}}
"""
    pre = archspec.check_text(text).graph
    assert [o.node for o in pre.outputs] == ["attn"] and pre.inputs_of("attn") == ("n",)
    post = archspec.check_text(text, {"pre": False}).graph
    assert [o.node for o in post.outputs] == ["n"] and post.inputs_of("n") == ("attn",)


def test_two_alternatives_kept_together_are_told_so_with_the_index():
    """The ModernBERT trial: alternatives whose conditions both held (`layer >= 0`, `layer == 1`)
    were told "id 'attn' is used twice ... make them unique", which alternatives never are."""
    text = """name: alt2
inputs: {x: [B, 4, 8]}
graph:
  - id: layers
    repeat: 2
    as: layer
    graph:
      - {id: attn, if: "${layer >= 0}", attention: {kind: global, heads: 2}}
      - {id: attn, if: "${layer == 1}", attention: {kind: global, heads: 2}}
"""
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    problem = info.value.diagnostics[0]
    assert problem.message == ("id 'attn' is kept twice in this graph (first at line 8): alternatives share an id "
                               "when one of them is kept, and here both are kept (with layer=1)")
    assert problem.loc.line == 9 and "exclude each other" in problem.hint


SKIPPED_SUM = """
archspec: 1
name: skipped_sum
params: {parallel: false}
inputs:
  x: [B, 8, 32]
blocks:
  layer:
    inputs: [x]
    graph:
      - {id: attn, from: x, attention: {kind: causal, heads: 2, residual: false}}
      - {id: mlp, from: x, mlp: {ratio: 2, residual: false}}
      - {id: out, if: "${parallel}", from: [x, attn, mlp], add: {}}
      - {id: out, if: "${not parallel}", from: [x, attn], add: {}}
graph:
  - {id: layers, repeat: 2, layer: {}}
"""


def test_a_skipped_node_that_would_drop_what_it_reads_is_an_error():
    """The Falcon trial's block ended in `{if: ${parallel}, from: [x, attn, mlp], add}`: with
    parallel false it passed x on, every layer an identity that built (warnings only), loaded every
    weight and was 1.69 off. A skipped node whose other inputs then feed nothing is an error, once
    for every copy; where the other inputs are read elsewhere it is not."""
    with pytest.raises(SpecError) as caught:
        archspec.check_text(SKIPPED_SUM)
    (d,) = caught.value.diagnostics
    assert d.message == ("switched off, this node passes its first input 'x' on, and 'layers.0.mlp', which it "
                         "reads too, then feeds no output")
    assert d.path == "layers.0.out" and d.loc.line == 13
    fixed = SKIPPED_SUM.replace("from: [x, attn], add: {}}", "from: [x, attn], add: {}}\n"
                                "      - {id: both, if: \"${not parallel}\", from: [out, mlp], add: {}}")
    assert archspec.check_text(fixed).graph is not None  # mlp is read by seq2: nothing dropped
    assert archspec.check_text(SKIPPED_SUM.replace("parallel: false", "parallel: true")).graph is not None
