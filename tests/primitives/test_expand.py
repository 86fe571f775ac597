"""compiler.expand (with archspec.compose): params, expressions, blocks, repeat, if, from,
outputs, extends and --set, turned into the IR with dotted paths."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import archspec
from archspec.language.compose import compose
from archspec.language.loader import load_file, load_text
from archspec.core.errors import Loc, SpecError
from archspec.language.expand import expand
from archspec.language.limits import MAX_REPEAT

ROOT = Path(__file__).resolve().parents[2]


def compose_path(path, overrides=None):
    return compose(load_file(path), overrides)


def spec(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


def ir(text: str, overrides=None):
    return expand(compose(load_text(spec(text), "<spec>"), overrides))


def errors(text: str, overrides=None):
    with pytest.raises(SpecError) as info:
        ir(text, overrides)
    return info.value.diagnostics


def names(graph) -> list[str]:
    return [n.name for n in graph.nodes()]


TOKENS = """
archspec: 1
name: t
inputs:
  x: {shape: [B, 16, 8], grid: [4, 4]}
"""


# -- chaining, ids and paths ------------------------------------------------------------------


def test_a_plain_list_chains_and_ids_default_to_the_op():
    g = ir(TOKENS + "graph:\n  - norm: {}\n  - mlp: {ratio: 2.0}\n  - norm: {}\n")
    assert names(g) == ["x", "norm", "mlp", "norm_1"]
    assert g.node("mlp").inputs == ("norm",) and g.node("norm_1").inputs == ("mlp",)
    assert [o.name for o in g.outputs] == ["output"] and g.outputs[0].node == "norm_1"


def test_default_ids_skip_taken_names():
    g = ir(TOKENS + "graph:\n  - norm: {}\n  - id: norm_1\n    norm: {}\n  - norm: {}\n")
    assert names(g) == ["x", "norm", "norm_1", "norm_2"]


def test_swin_paths():
    g = expand(compose_path(str(ROOT / "specs" / "swin_t.yaml")))
    paths = names(g)
    assert paths[:4] == ["image", "patch_embed", "stages.0.blocks.0.attn", "stages.0.blocks.0.mlp"]
    assert "stages.2.blocks.5.mlp" in paths and "stages.2.blocks.6.attn" not in paths
    assert "stages.0.downsample" not in paths  # if: ${s > 0}
    assert g.node("stages.0.blocks.0.attn").inputs == ("patch_embed",)  # the skipped node passes its input on
    assert g.node("stages.1.downsample").inputs == ("stages.0.blocks.1.mlp",)
    attn = g.node("stages.2.blocks.3.attn")
    assert attn.params.kind == "shifted" and attn.params.heads == 12
    assert attn.loc.line == 31  # the `attention:` key inside the block
    assert attn.param_loc("window") == Loc(str(ROOT / "specs" / "swin_t.yaml"), 34, 19)
    assert len(g) == 1 + 1 + 2 * 12 + 3 + 2


def test_repeat_index_default_and_named():
    g = ir(TOKENS + spec("""
        graph:
          - id: a
            repeat: 3
            mlp: {hidden: "${(i + 1) * 8}"}
          - id: b
            repeat: 2
            as: k
            mlp: {hidden: "${100 + k}"}
        """))
    assert [g.node(f"a.{i}").params.hidden for i in range(3)] == [8, 16, 24]
    assert [g.node(f"b.{k}").params.hidden for k in range(2)] == [100, 101]
    assert g.node("a.1").inputs == ("a.0",) and g.node("b.0").inputs == ("a.2",)


def test_repeat_zero_and_if_false_pass_their_input_through():
    g = ir(TOKENS + spec("""
        params: {depth: 0, use: false}
        graph:
          - id: first
            norm: {}
          - id: none
            repeat: ${depth}
            mlp: {ratio: 2.0}
          - id: maybe
            if: ${use}
            mlp: {ratio: 2.0}
          - id: last
            from: none
            norm: {}
        """))
    assert names(g) == ["x", "first", "last"]
    assert g.node("last").inputs == ("first",)


def test_a_skipped_node_reading_several_inputs_passes_its_first_on():
    """Where what it also reads feeds an output another way; where that would then feed nothing
    it is an error (test_alternatives.py: the Falcon trial's identity layers)."""
    g = ir(TOKENS + spec("""
        params: {parallel: false}
        graph:
          - {id: attn, norm: {}}
          - {id: mlp, mlp: {ratio: 2.0}}
          - {id: out, if: "${parallel}", from: [x, mlp], add: {}}
          - {id: last, norm: {}}
          - {id: both, from: [last, mlp], add: {}}
        """))
    assert g.node("last").inputs == ("x",)


def test_from_may_be_built_by_expressions_where_the_node_is():
    g = ir(TOKENS + spec("""
        params: {parallel: true}
        graph:
          - id: ms
            repeat: 3
            as: s
            graph:
              - {id: a, norm: {}}
              - {id: b, from: "${'a' if s % 2 == 0 else 'x'}", norm: {}}
          - {id: attn, from: x, norm: {}}
          - {id: mlp, from: "${'x' if parallel else 'attn'}", mlp: {ratio: 2.0}}
          - {id: out, from: [attn, mlp, "ms.${3 - 2}.a"], add: {}}
        """))
    assert g.node("ms.0.b").inputs == ("ms.0.a",) and g.node("ms.1.b").inputs == ("x",)
    assert g.node("mlp").inputs == ("x",)
    assert g.node("out").inputs == ("attn", "mlp", "ms.1.a")
    assert ir(TOKENS + spec("""
        params: {parallel: false}
        graph:
          - {id: attn, from: x, norm: {}}
          - {id: mlp, from: "${'x' if parallel else 'attn'}", mlp: {ratio: 2.0}}
        """)).node("mlp").inputs == ("attn",)


def test_an_expression_in_from_must_give_a_path():
    (d,) = errors(TOKENS + "params: {n: 2}\ngraph:\n  - {id: a, from: \"${n}\", norm: {}}\n")
    assert d.message == "`from` names a node or input; '${n}' gives 2" and d.loc == Loc("<spec>", 7, 19)
    (d,) = errors(TOKENS + "graph:\n  - {id: a, from: \"${nope}\", norm: {}}\n")
    assert "nope" in d.message and d.loc.line == 6


def test_forward_reference_and_skip_connections():
    g = ir(TOKENS + spec("""
        graph:
          - id: a
            norm: {}
          - id: sum_later
            from: c
            norm: {}
          - id: c
            from: a
            mlp: {ratio: 2.0}
        outputs: [sum_later]
        """))
    assert g.node("sum_later").inputs == ("c",) and g.node("c").inputs == ("a",)


def test_dotted_paths_reach_into_groups_and_repeats():
    g = ir(TOKENS + spec("""
        graph:
          - id: enc
            graph:
              - id: layers
                repeat: 2
                graph:
                  - id: attn
                    attention: {kind: global, heads: 2}
                  - id: mlp
                    mlp: {ratio: 2.0}
              - id: norm
                norm: {}
          - id: tap
            from: enc.layers.0.attn
            norm: {}
          - id: whole
            from: enc
            norm: {}
          - id: last_layer
            from: enc.layers
            norm: {}
        outputs: {first_attn: tap, encoded: whole, layers: last_layer}
        """))
    assert g.node("tap").inputs == ("enc.layers.0.attn",)
    assert g.node("whole").inputs == ("enc.norm",)  # a group reads as its last node
    assert g.node("last_layer").inputs == ("enc.layers.1.mlp",)  # a repeat reads as its last repetition
    assert [(o.name, o.node) for o in g.outputs] == [("first_attn", "tap"), ("encoded", "whole"),
                                                      ("layers", "last_layer")]


def test_output_names_from_a_list_replace_dots():
    g = ir(TOKENS + "graph:\n  - id: g\n    graph:\n      - norm: {}\noutputs: [g.norm, g]\n")
    assert [(o.name, o.node) for o in g.outputs] == [("g_norm", "g.norm"), ("g", "g.norm")]


def test_ids_are_scoped_per_graph():
    g = ir(TOKENS + spec("""
        graph:
          - id: a
            graph: [{id: n, norm: {}}]
          - id: b
            graph: [{id: n, norm: {}}]
        """))
    assert names(g) == ["x", "a.n", "b.n"]


def test_two_inputs_and_cross_attention():
    g = expand(compose_path(str(ROOT / "specs" / "transformer_base.yaml")))
    assert g.node("decoder.layers.0.cross_attn").inputs == ("decoder.layers.0.self_attn", "encoder.norm")
    assert g.node("decoder.layers.1.self_attn").inputs == ("decoder.layers.0.mlp",)
    assert g.node("tgt_embed").params.tie == "src_embed"  # `tie` names a node: resolved to its path


def test_tie_resolves_to_the_full_path():
    g = ir(spec("""
        name: lm
        inputs:
          t: {shape: [B, 8], dtype: int64}
        graph:
          - id: tower
            graph:
              - id: embed
                embed: {vocab: 10, dim: 4, max_len: 8}
              - id: logits
                head: {kind: lm, tie: embed}
        """))
    assert g.node("tower.logits").params.tie == "tower.embed"


# -- params and expressions ---------------------------------------------------------------------


def test_params_may_refer_to_later_params():
    g = ir(TOKENS + spec("""
        params:
          hidden: ${width * ratio}
          ratio: 4
          width: ${len(ws) * 4}
          ws: [1, 1]
        graph:
          - mlp: {hidden: "${hidden}"}
        """))
    assert g.node("mlp").params.hidden == 32


def test_param_cycle():
    (d,) = errors(TOKENS + "params:\n  a: ${b}\n  b: ${a + 1}\ngraph:\n  - norm: {}\n")
    assert d.message == "param 'a' depends on itself: a -> b -> a"
    assert d.loc == Loc("<spec>", 6, 6)


def test_a_param_referring_to_itself():
    (d,) = errors(TOKENS + "params:\n  a: ${a}\ngraph:\n  - norm: {}\n")
    assert d.message == "param 'a' depends on itself: a -> a"


def test_failed_params_are_reported_once_and_their_readers_stay_quiet():
    diags = errors(TOKENS + spec("""
        params:
          bad: ${1 // 0}
          user: ${bad + 1}
          other: ${nope}
        graph:
          - mlp: {hidden: "${user}"}
        """))
    assert [d.message for d in diags] == ["division by zero", "unknown name 'nope'"]


def test_expression_error_columns_point_into_the_expression():
    (d,) = errors(TOKENS + "graph:\n  - mlp: {hidden: \"${4 * nope}\"}\n")
    assert d.loc == Loc("<spec>", 6, 26) and d.path == "mlp"  # the n of nope
    (d,) = errors(TOKENS + "graph:\n  - mlp:\n      hidden: ${4 * nope}\n")
    assert d.loc == Loc("<spec>", 7, 21)


def test_errors_in_repeated_nodes_name_the_repetition_and_are_reported_once():
    (d,) = errors(TOKENS + "graph:\n  - id: l\n    repeat: 3\n    mlp: {hidden: \"${[8, 8][i]}\"}\n")
    assert d.message == "index 2 is out of range for a list of 2" and d.path == "l.2"


def test_if_must_be_a_boolean():
    (d,) = errors(TOKENS + "graph:\n  - if: ${1}\n    norm: {}\n")
    assert d.message == "`if` must be true or false, got 1" and d.path == "norm"
    (d,) = errors(TOKENS + "graph:\n  - norm: {}\n  - if: ${1}\n    norm: {}\n")
    assert d.path == "norm_1"  # the node's own name, as everywhere else


@pytest.mark.parametrize("value, shown", [("-1", "-1"), (str(MAX_REPEAT + 1), str(MAX_REPEAT + 1)),
                                          ("${'a'}", "'a'"), ("${True}", "True")])
def test_repeat_bounds(value, shown):
    (d,) = errors(TOKENS + f"graph:\n  - repeat: {value}\n    norm: {{}}\n")
    assert d.message == f"`repeat` must be a whole number from 0 to {MAX_REPEAT}, got {shown}"
    assert d.loc.line == 6


def test_as_without_repeat():
    (d,) = errors(TOKENS + "graph:\n  - as: k\n    norm: {}\n")
    assert d.message == "`as` names the index of a `repeat`"


# -- blocks ------------------------------------------------------------------------------------------

BLOCK = TOKENS + """
params:
  heads: 2
blocks:
  layer:
    params: {heads: ~, hidden: "${heads * 8}"}
    graph:
      - id: attn
        attention: {kind: global, heads: "${heads}"}
      - id: mlp
        mlp: {hidden: "${hidden}"}
"""


def test_block_params_defaults_and_shadowing():
    g = ir(BLOCK + "graph:\n  - id: l\n    repeat: 2\n    layer: {heads: \"${1 + i}\"}\n")
    assert names(g) == ["x", "l.0.attn", "l.0.mlp", "l.1.attn", "l.1.mlp"]
    assert g.node("l.0.attn").params.heads == 1 and g.node("l.1.attn").params.heads == 2
    assert g.node("l.1.mlp").params.hidden == 16  # the default reads the given heads, not the spec's
    assert g.node("l.1.attn").inputs == ("l.0.mlp",)


def test_block_missing_parameter():
    (d,) = errors(BLOCK + "graph:\n  - layer: {hidden: 4}\n")
    assert d.message == "block 'layer' needs parameter 'heads'" and d.path == "layer"
    assert d.loc == Loc("<spec>", 17, 5)  # the block's name where it is used


def test_block_unknown_parameter():
    (d,) = errors(BLOCK + "graph:\n  - layer: {heads: 2, hiden: 4}\n")
    assert d.message == "block 'layer' has no parameter 'hiden'" and d.hint == "did you mean 'hidden'?"
    assert d.loc == Loc("<spec>", 17, 23)


def test_block_body_must_be_a_mapping():
    (d,) = errors(BLOCK + "graph:\n  - layer: 3\n")
    assert d.message == "block 'layer' takes a mapping of its parameters"


def test_block_recursion():
    (d,) = errors(TOKENS + spec("""
        blocks:
          a: {graph: [{b: {}}]}
          b: {graph: [{norm: {}}, {a: {}}]}
        graph:
          - a: {}
        """))
    assert d.message == "block 'a' uses itself: a -> b -> a" and d.path == "a.b.a"


def test_block_named_like_a_primitive():
    (d,) = errors(TOKENS + "blocks:\n  norm: {graph: [{mlp: {ratio: 1.0}}]}\ngraph:\n  - norm: {}\n")
    assert d.message == "block 'norm' has the name of a primitive" and d.loc == Loc("<spec>", 6, 3)


def test_block_with_two_inputs():
    g = ir(TOKENS + spec("""
        blocks:
          mix:
            inputs: [q, kv]
            graph:
              - from: [q, kv]
                attention: {kind: cross, heads: 2}
        graph:
          - id: a
            norm: {}
          - id: m
            from: [x, a]
            mix: {}
        """))
    assert g.node("m.attention").inputs == ("x", "a")


def test_block_scope_is_closed():
    (d,) = errors(TOKENS + "blocks:\n  b: {graph: [{from: outer, norm: {}}]}\ngraph:\n"
                           "  - id: outer\n    norm: {}\n  - b: {}\n")
    assert d.message == "unknown node 'outer'" and d.hint == "known here: x, norm"  # the block's own


def test_block_input_count():
    (d,) = errors(TOKENS + "blocks:\n  b: {inputs: [p, q], graph: [{norm: {}}]}\ngraph:\n  - b: {}\n")
    assert d.message == "block 'b' reads 2 input(s) (p, q), this node gives 1"


# -- references ------------------------------------------------------------------------------------


def test_unknown_reference_suggests():
    (d,) = errors(TOKENS + "graph:\n  - id: embed\n    norm: {}\n  - from: embd\n    norm: {}\n")
    assert (d.message, d.hint, d.path) == ("unknown node 'embd'", "did you mean 'embed'?", "norm")
    assert d.loc == Loc("<spec>", 8, 11)


def test_unknown_member():
    (d,) = errors(TOKENS + "graph:\n  - id: g\n    graph: [{id: a, norm: {}}]\noutputs: [g.b]\n")
    assert d.message == "'g' has no member 'b' (it has a)" and d.path is None


def test_member_of_a_repeat_needs_an_index():
    (d,) = errors(TOKENS + "graph:\n  - id: r\n    repeat: 2\n    graph: [{id: a, norm: {}}]\noutputs: [r.a]\n")
    assert d.hint == "'r' is repeated: name one repetition, e.g. r.1.a"
    (d,) = errors(TOKENS + "graph:\n  - id: r\n    repeat: 2\n    graph: [{id: a, norm: {}}]\noutputs: [r.5]\n")
    assert (d.message, d.hint) == ("'r' has no member '5' (it has 0, 1)", "'r' is repeated 2 times: a copy's index is 0 "
                                                                          "to 1")  # the DPT trial was told 'r.1.5'


def test_reference_cycle():
    (d,) = errors(TOKENS + "graph:\n  - id: a\n    from: b\n    norm: {}\n  - id: b\n    norm: {}\n")
    assert d.message == "cycle: a -> b -> a" and d.path == "a" and d.loc == Loc("<spec>", 7, 11)


def test_self_reference_through_a_skipped_node():
    (d,) = errors(TOKENS + "graph:\n  - id: n\n    if: false\n    from: n\n    norm: {}\n")
    assert d.message == "'n' refers to itself through skipped nodes"


def test_duplicate_id():
    (d,) = errors(TOKENS + "graph:\n  - id: a\n    norm: {}\n  - id: a\n    norm: {}\n")
    assert d.message == "id 'a' is used twice in this graph (first at line 6)" and d.loc == Loc("<spec>", 8, 9)


def test_an_id_may_not_reuse_an_input_name():
    (d,) = errors(TOKENS + "graph:\n  - id: x\n    norm: {}\n")
    assert d.message == "id 'x' is used twice in this graph (first at line 4)"


def test_empty_outputs():
    (d,) = errors(TOKENS + "graph:\n  - norm: {}\noutputs: []\n")
    assert d.message == "`outputs` is empty"


def test_independent_errors_are_collected():
    diags = errors(TOKENS + spec("""
        graph:
          - id: a
            mlp: {ratioo: 2.0}
          - id: b
            norm: {eps: "${zzz}"}
          - id: c
            bogus: {}
        """))
    assert [d.path for d in diags] == ["a", "b", None]
    assert [d.message for d in diags] == ["unknown key 'ratioo' in mlp", "unknown name 'zzz'", "unknown op 'bogus'"]


# -- inputs and dims -------------------------------------------------------------------------------


def test_symbolic_dims():
    g = ir(spec("""
        name: t
        dims: {L: [1, 77]}
        params: {width: 8}
        inputs:
          ids: {shape: [B, L], dtype: int64}
          feats: [B, "${width * 2}"]
        graph:
          - from: ids
            embed: {vocab: 10, dim: 4, max_len: 77}
        """))
    ids = g.node("ids").type
    assert ids.layout == "ids" and str(ids.shape[1]) == "L" and ids.shape[1].hi == 77
    assert g.node("feats").type.shape[1] == 16


@pytest.mark.parametrize("dims, message", [
    ("{B: [1, 4]}", "`B` is the batch and is always symbolic; declare other dims"),
    ("{L: [5, 1]}", "dim 'L' needs a range [min, max] with 1 <= min <= max <= 16,777,216"),
    ("{L: [1, 99999999]}", "dim 'L' needs a range [min, max] with 1 <= min <= max <= 16,777,216"),
    ("{width: [1, 4]}", "dim 'width' has the name of a param"),
])
def test_bad_dims(dims, message):
    (d,) = errors(f"name: t\nparams: {{width: 8}}\ndims: {dims}\ninputs:\n  x: [B, 4, 8]\ngraph:\n  - norm: {{}}\n")
    assert d.message == message


def test_input_needs_the_batch_first():
    (d,) = errors("name: t\ninputs:\n  x: [4, B, 8]\ngraph:\n  - norm: {}\n")
    assert d.message == "input 'x' must start with the batch dim B" and d.loc == Loc("<spec>", 3, 7)


def test_input_grid_must_hold_the_tokens():
    (d,) = errors("name: t\ninputs:\n  x: {shape: [B, 10, 8], grid: [3, 3]}\ngraph:\n  - norm: {}\n")
    assert d.message == "grid [3, 3] does not hold 10 tokens"


# -- extends -------------------------------------------------------------------------------------------


def write(path: Path, body: str) -> Path:
    path.write_text(spec(body))
    return path


@pytest.fixture
def family(tmp_path, monkeypatch):
    monkeypatch.setenv("ARCHSPEC_PATH", str(tmp_path))  # wide/child.yaml extends ../base.yaml, above its folder
    write(tmp_path / "base.yaml", """
        archspec: 1
        name: base
        params: {dim: 8, depth: 2, ratio: 2.0}
        inputs:
          x: {shape: [B, 16, "${dim}"], grid: [4, 4]}
        blocks:
          layer:
            graph:
              - mlp: {ratio: "${ratio}"}
        graph:
          - id: layers
            repeat: ${depth}
            layer: {}
        """)
    (tmp_path / "wide").mkdir()
    write(tmp_path / "wide" / "child.yaml", """
        extends: ../base.yaml
        name: child
        params: {depth: 3}
        """)
    return tmp_path


def test_extends_overrides_params_key_by_key(family):
    g = expand(compose_path(str(family / "wide" / "child.yaml")))
    assert g.name == "child"
    assert names(g) == ["x", "layers.0.mlp", "layers.1.mlp", "layers.2.mlp"]
    assert g.node("layers.0.mlp").params.ratio == 2.0  # inherited


def test_extends_replaces_the_graph(family):
    write(family / "other.yaml", """
        extends: base.yaml
        name: other
        graph:
          - norm: {}
        """)
    assert names(expand(compose_path(str(family / "other.yaml")))) == ["x", "norm"]


def test_errors_point_into_the_file_that_wrote_the_value(family):
    write(family / "bad.yaml", """
        extends: base.yaml
        name: bad
        params: {ratio: "${1 / 0}"}
        """)
    with pytest.raises(SpecError) as info:
        expand(compose_path(str(family / "bad.yaml")))
    assert info.value.loc == Loc(str(family / "bad.yaml"), 3, 20)


def test_chained_extends_and_set(family):
    write(family / "wide" / "grandchild.yaml", "extends: child.yaml\nname: gc\nparams: {ratio: 4.0}\n")
    g = expand(compose_path(str(family / "wide" / "grandchild.yaml"), {"depth": "1"}))
    assert names(g) == ["x", "layers.0.mlp"] and g.node("layers.0.mlp").params.ratio == 4.0


def test_extends_missing_file_suggests(family):
    write(family / "typo.yaml", "extends: bsae.yaml\nname: t\n")
    with pytest.raises(SpecError) as info:
        compose_path(str(family / "typo.yaml"))
    assert (info.value.message, info.value.hint) == ("extends: no such file bsae.yaml", "did you mean 'base.yaml'?")
    assert info.value.loc == Loc(str(family / "typo.yaml"), 1, 10)


def test_extends_loop(tmp_path):
    write(tmp_path / "a.yaml", "extends: b.yaml\nname: a\n")
    write(tmp_path / "b.yaml", "extends: a.yaml\nname: b\n")
    with pytest.raises(SpecError) as info:
        compose_path(str(tmp_path / "a.yaml"))
    assert info.value.message == "extends forms a loop: a.yaml -> b.yaml -> a.yaml"
    assert info.value.loc == Loc(str(tmp_path / "b.yaml"), 1, 10)


# -- --set ------------------------------------------------------------------------------------------------

SWIN = str(ROOT / "specs" / "swin_t.yaml")


def test_set_values_are_yaml():
    g = expand(compose_path(SWIN, {"depths": "[2, 2, 18, 2]", "img": "256", "window": "8"}))
    assert "stages.2.blocks.17.mlp" in names(g)
    assert g.node("image").type.shape[2] == 256 and g.node("stages.0.blocks.0.attn").params.window == 8


def test_set_takes_expressions_and_plain_values():
    g = expand(compose_path(SWIN, {"img": "${2 * 112}", "classes": 10}))
    assert g.node("image").type.shape[2] == 224 and g.node("head").params.classes == 10


def test_set_unknown_param():
    with pytest.raises(SpecError) as info:
        compose_path(SWIN, {"img": "256", "windw": "8"})
    (d,) = info.value.diagnostics
    assert (d.message, d.hint, d.loc) == ("--set: unknown parameter 'windw'", "did you mean 'window'?",
                                          Loc("<command line>", 2, 1))


def test_set_value_with_bad_yaml_points_into_the_command_line():
    with pytest.raises(SpecError) as info:
        compose_path(SWIN, {"depths": "[2, 2"})
    d = info.value.diagnostics[0]
    assert d.loc.file == "<command line>" and d.loc.line == 1 and d.loc.col > len("depths=")
    assert d.message.startswith("YAML syntax:")


def test_set_expression_errors_point_into_the_command_line():
    with pytest.raises(SpecError) as info:
        expand(compose_path(SWIN, {"img": "${224 // 0}"}))
    assert info.value.loc == Loc("<command line>", 1, 7)
    assert info.value.message == "division by zero"


def test_the_reference_opens_with_a_spec_that_checks():
    """specs/README.md's first example is a working spec (the reference must not rot)."""
    import archspec

    text = (ROOT / "specs" / "README.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    report = archspec.check_text(example)
    assert report.name == "tiny_vit" and report.params == 5_717_416  # timm's vit_tiny_patch16_224


def test_set_window_from_an_expression():
    g = expand(compose_path(SWIN, {"window": "${img // 32}"}))
    assert g.node("stages.0.blocks.0.attn").params.window == 7


def test_alternatives_may_share_an_id_when_one_is_kept():
    text = """
name: alt
params: {linear: true}
inputs:
  x: {shape: [B, 16, 8], grid: [4, 4]}
graph:
  - id: attn
    if: ${not linear}
    attention: {kind: sra, heads: 2, sr_ratio: 2}
  - id: attn
    if: ${linear}
    attention: {kind: linear_sra, heads: 2, pool: 2}
  - id: out
    from: attn
    norm: {}
"""
    graph = archspec.check_text(text).graph
    assert graph.node("attn").params.kind == "linear_sra"
    assert graph.node("out").inputs == ("attn",)
    graph = archspec.check_text(text, overrides={"linear": "false"}).graph
    assert graph.node("attn").params.kind == "sra"


def test_two_kept_nodes_may_not_share_an_id():
    text = """
name: alt
inputs:
  x: [B, 4, 8]
graph:
  - {id: a, norm: {}}
  - {id: a, if: "${1 > 0}", norm: {}}
"""
    with pytest.raises(archspec.SpecError, match="id 'a' is kept twice in this graph .first at line 6.: alternatives share an id when one"):
        archspec.check_text(text)


def test_outputs_may_be_built_by_expressions():
    g = ir(TOKENS + spec("""
        params: {depth: 3}
        graph:
          - {id: blocks, repeat: "${depth}", norm: {}}
        outputs: {last: "blocks.${depth - 1}", first: blocks.0}
        """))
    assert [(o.name, o.node) for o in g.outputs] == [("last", "blocks.2"), ("first", "blocks.0")]
    assert [(o.name, o.node) for o in ir(TOKENS + spec("""
        params: {depth: 3}
        graph:
          - {id: blocks, repeat: "${depth}", norm: {}}
        outputs: ["blocks.${depth - 2}"]
        """)).outputs] == [("blocks_1", "blocks.1")]


def test_set_text_where_the_spec_has_a_number_is_an_error():
    (d,) = errors(TOKENS + "params: {ratio: 0.25}\ngraph:\n  - mlp: {ratio: 2.0}\n", {"ratio": "abc"})
    assert d.message == "--set ratio: the spec's value is a number (0.25); 'abc' is text"
    assert d.loc == Loc("<command line>", 1, 7)
    (d,) = errors(TOKENS + "params: {ratio: 0.25}\ngraph:\n  - mlp: {ratio: 2.0}\n", {"ratio": "None"})
    assert d.message.endswith("'None' is text (for no value write null or ~)")  # the DeepSeek-V2 trial
    assert ir(TOKENS + "params: {use: true}\ngraph:\n  - mlp: {ratio: 2.0}\n", {"use": "qv"})  # a word may do
    assert ir(TOKENS + "params: {ratio: 0.25}\ngraph:\n  - mlp: {ratio: 2.0}\n", {"ratio": "${1 / 2}"})



@pytest.mark.parametrize("word, meant", [("no", "false"), ("off", "false"), ("Yes", "true"), ("ON", "true")])
def test_set_a_yaml_11_boolean_word_where_the_spec_has_a_boolean_is_an_error(word, meant):
    """The FastViT trial: `--set scale_branch=no` was the text 'no', which `${scale_branch and k > 1}`
    read as true: the branch kept, 72 parameters more, without a word."""
    (d,) = errors(TOKENS + "params: {use: true}\ngraph:\n  - mlp: {ratio: 2.0}\n", {"use": word})
    assert d.message == (f"--set use: the spec's value is true, and {word!r} is text, not a boolean (YAML 1.2 reads "
                         f"yes, no, on and off as words): write {meant}")


def test_a_cycle_through_copies_of_a_repeat_points_at_blocks():
    (d,) = errors(TOKENS + spec("""
        graph:
          - id: h
            repeat: 2
            graph:
              - {id: attn, norm: {}}
              - {id: out, from: [h, attn], add: {}}
        """))
    assert d.message.startswith("cycle: ") and "write a block with `inputs: [x]`" in d.hint
    (d,) = errors(TOKENS + "graph:\n  - id: a\n    from: b\n    norm: {}\n  - id: b\n    norm: {}\n")
    assert d.hint == "a node cannot read, directly or indirectly, its own output"


def test_x_inside_an_inline_group_says_that_a_block_names_its_input():
    """A residual inside a repeated `graph:` (user trials reached for `x` there): the hint says
    that `x` is a block's input and that the group should be a block."""
    (d,) = errors(TOKENS.replace("  x:", "  tokens:") + "graph:\n  - id: blocks\n    repeat: 2\n    graph:\n"
                  "      - {id: n, norm: {}}\n      - {id: res, from: [x, n], add: {}}\n")
    assert d.message == "unknown node 'x'" and d.path == "blocks.0.res"
    assert "`x` is a block's input: an inline group or a repeated `graph:` has none" in d.hint
    assert "write the group as a block (section 3.5)" in d.hint


def test_a_block_without_inputs_says_how_to_write_a_generator():
    """User trial 13 wanted `inputs: []` for a block of constants: the error says to take one
    input and not read it (tests/lowering/test_lowering.py builds such a block inside a group)."""
    (d,) = errors(TOKENS + "blocks:\n  gen:\n    inputs: []\n    graph: [{constant: {shape: [4]}}]\ngraph:\n"
                           "  - {norm: {}}\n")
    assert d.message == "`blocks.gen.inputs` must not be empty" and (d.loc.line, d.loc.col) == (7, 13)
    assert "a block that makes constants alone (a position generator) may take one and not read it" in d.hint
