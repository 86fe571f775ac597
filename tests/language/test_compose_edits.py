"""archspec.language.compose: a spec that `extends` another edits its base's graph with
`remove`, `replace` and `insert`, naming nodes by path (`head`, `stages.mlp`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import archspec
from archspec.core.errors import Loc, SpecError
from archspec.language.compose import compose
from archspec.language.expand import expand
from archspec.language.loader import load_file

ROOT = Path(__file__).resolve().parents[2]
VIT_B16 = ROOT / "specs" / "vit_b16.yaml"
VIT_B16_PARAMS = 86_567_656
VIT_B16_HEAD_PARAMS = 769_000  # 768 * 1000 + 1000

BASE = """
archspec: 1
name: base
params: {dim: 64}
inputs:
  image: [B, 3, 32, 32]
graph:
  - id: patch_embed
    patchify: {patch: 4, dim: "${dim}", cls_token: true}
  - id: stages
    graph:
      - id: attn
        attention: {kind: global, heads: 4}
      - id: mlp
        mlp: {ratio: 2}
  - norm: {}
  - norm: {}
  - id: head
    head: {kind: classify, classes: 10, pool: cls}
"""
# lines of BASE: 7 patch_embed, 9 stages, 11 stages.attn, 13 stages.mlp, 15 norm, 16 norm_1, 17 head

CHILD = "archspec: 1\nextends: base.yaml\nname: child\n"  # the edits start on line 4


def write(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body).lstrip("\n"))
    return path


@pytest.fixture
def folder(tmp_path) -> Path:
    write(tmp_path / "base.yaml", BASE)
    return tmp_path


def child(folder: Path, edits: str, name: str = "child.yaml") -> Path:
    return write(folder / name, CHILD + textwrap.dedent(edits).lstrip("\n"))


def graph_of(path: Path, overrides=None):
    return expand(compose(load_file(str(path)), overrides))


def names(graph) -> list[str]:
    return [n.name for n in graph.nodes() if not n.is_input]


def problems(path: Path, overrides=None) -> list[tuple]:
    """(message, hint, file name, line, col) of every error checking `path` gives."""
    with pytest.raises(SpecError) as info:
        archspec.check(str(path), overrides)
    return [(d.message, d.hint, Path(d.loc.file).name, d.loc.line, d.loc.col) for d in info.value.diagnostics]


def problem(path: Path, overrides=None) -> tuple:
    (found,) = problems(path, overrides)
    return found


BASE_NODES = ["patch_embed", "stages.attn", "stages.mlp", "norm", "norm_1", "head"]


def test_the_base_itself(folder):
    assert names(graph_of(folder / "base.yaml")) == BASE_NODES


# -- remove ------------------------------------------------------------------------------------------


def test_remove_a_top_level_node(folder):
    g = graph_of(child(folder, "remove: [head]"))
    assert names(g) == ["patch_embed", "stages.attn", "stages.mlp", "norm", "norm_1"]
    assert g.outputs[0].node == "norm_1"


def test_remove_a_node_of_an_inline_group(folder):
    g = graph_of(child(folder, "remove: [stages.mlp]"))
    assert names(g) == ["patch_embed", "stages.attn", "norm", "norm_1", "head"]
    assert g.node("norm").inputs == ("stages.attn",)


def test_a_node_without_id_is_named_after_its_op(folder):
    g = graph_of(child(folder, "remove: [norm_1]"))
    assert names(g) == ["patch_embed", "stages.attn", "stages.mlp", "norm", "head"]
    assert g.node("norm").loc.line == 15  # the first norm stays, with its position in the base


def test_paths_of_one_edit_are_read_before_it_changes_anything(folder):
    # removing `norm` first would make the second norm `norm`; both paths name the base's nodes
    g = graph_of(child(folder, "remove: [norm, norm_1]"))
    assert names(g) == ["patch_embed", "stages.attn", "stages.mlp", "head"]


def test_a_path_named_twice_or_inside_a_removed_group_changes_nothing_more(folder):
    g = graph_of(child(folder, "remove: [head, head, stages, stages.mlp]"))
    assert names(g) == ["patch_embed", "norm", "norm_1"]


def test_the_edit_keys_are_gone_from_the_composed_document(folder):
    doc = compose(load_file(str(child(folder, "remove: [head]\nreplace: {norm: {norm: {}}}\n"
                                              "insert: [{after: norm, nodes: [{norm: {}}]}]\n"))))
    assert not {"remove", "replace", "insert", "extends"} & set(doc.data)
    assert not [p for table in (doc.locs, doc.key_locs) for p in table if p[:1] in (("remove",), ("insert",))]


# -- replace -----------------------------------------------------------------------------------------


def test_replace_a_node_keeps_its_name(folder):
    g = graph_of(child(folder, """
        replace:
          head:
            head: {kind: features, pool: cls}
        """))
    assert names(g) == BASE_NODES
    assert g.node("head").op.kind == "features" and g.node("head").loc.file.endswith("child.yaml")


def test_replace_a_node_of_a_group_with_an_id_of_its_own(folder):
    g = graph_of(child(folder, """
        replace:
          stages.mlp:
            id: ffn
            mlp: {ratio: 4}
        """))
    assert names(g) == ["patch_embed", "stages.attn", "stages.ffn", "norm", "norm_1", "head"]
    assert g.node("stages.ffn").params.ratio == 4.0


def test_a_replacement_without_id_is_read_by_the_nodes_that_read_the_replaced_one(folder):
    write(folder / "skip.yaml", BASE.replace("  - id: head\n", "  - id: head\n    from: stages.mlp\n"))
    path = write(folder / "c.yaml", "extends: skip.yaml\nname: c\nreplace:\n  stages.mlp: {norm: {}}\n")
    g = graph_of(path)
    assert g.node("head").inputs == ("stages.mlp",) and g.node("stages.mlp").op.primitive == "norm"


def test_replace_a_whole_group(folder):
    g = graph_of(child(folder, """
        replace:
          stages:
            graph:
              - mlp: {ratio: 1}
        """))
    assert names(g) == ["patch_embed", "stages.mlp", "norm", "norm_1", "head"]


def test_a_replacement_may_repeat(folder):
    g = graph_of(child(folder, """
        replace:
          stages.attn:
            repeat: 2
            attention: {kind: global, heads: 2}
        """))
    assert names(g)[1:4] == ["stages.attn.0", "stages.attn.1", "stages.mlp"]


# -- insert ------------------------------------------------------------------------------------------


def test_insert_before_and_after(folder):
    g = graph_of(child(folder, """
        insert:
          - after: patch_embed
            nodes:
              - id: pre_norm
                norm: {}
          - before: stages.attn
            nodes:
              - id: pre_mlp
                mlp: {ratio: 1}
              - id: pre_attn
                attention: {kind: global, heads: 2}
          - after: head
            nodes:
              - {id: extra, from: norm, norm: {}}
        """))
    assert names(g) == ["patch_embed", "pre_norm", "stages.pre_mlp", "stages.pre_attn", "stages.attn",
                        "stages.mlp", "norm", "norm_1", "head", "extra"]
    assert g.node("pre_norm").inputs == ("patch_embed",) and g.node("stages.attn").inputs == ("stages.pre_attn",)
    assert g.node("extra").inputs == ("norm",) and g.outputs[0].node == "extra"


def test_inserts_next_to_one_node_keep_their_order(folder):
    g = graph_of(child(folder, """
        insert:
          - {after: patch_embed, nodes: [{id: a, norm: {}}]}
          - {after: patch_embed, nodes: [{id: b, norm: {}}]}
          - {before: head, nodes: [{id: c, norm: {}}]}
          - {before: head, nodes: [{id: d, norm: {}}]}
        """))
    assert names(g) == ["patch_embed", "a", "b", "stages.attn", "stages.mlp", "norm", "norm_1", "c", "d", "head"]


def test_an_inserted_node_without_id_is_counted_with_the_others(folder):
    g = graph_of(child(folder, "insert: [{before: norm, nodes: [{norm: {}}]}]\n"))
    assert names(g)[3:6] == ["norm", "norm_1", "norm_2"]
    assert g.node("norm").loc.file.endswith("child.yaml") and g.node("norm_1").loc.line == 15


# -- the order of the edits --------------------------------------------------------------------------


def test_edits_apply_remove_then_replace_then_insert(folder):
    g = graph_of(child(folder, """
        insert:
          - {after: features, nodes: [{id: tail, norm: {}}]}
        replace:
          head: {id: features, head: {kind: features, pool: cls}}
        remove: [norm_1]
        """))
    assert names(g) == ["patch_embed", "stages.attn", "stages.mlp", "norm", "features", "tail"]


def test_a_later_edit_cannot_name_what_an_earlier_one_took_away(folder):
    path = child(folder, """
        remove: [head]
        replace:
          head: {norm: {}}
        """)
    assert problem(path) == ("unknown node 'head' in the base graph",
                             "there is no 'head' after `remove`: edits apply in the order remove, replace, insert",
                             "child.yaml", 6, 3)


def test_insert_sees_the_names_the_replacement_gives(folder):
    path = child(folder, """
        replace:
          head: {id: features, head: {kind: features, pool: cls}}
        insert:
          - {after: head, nodes: [{norm: {}}]}
        """)
    assert problem(path) == ("unknown node 'head' in the base graph",
                             "there is no 'head' after `replace`: edits apply in the order remove, replace, insert",
                             "child.yaml", 7, 13)


def test_a_grandchild_sees_the_edited_graph_and_may_edit_it_again(folder):
    child(folder, "remove: [head]\n")
    path = write(folder / "grandchild.yaml", """
        extends: child.yaml
        name: grandchild
        insert:
          - {after: norm_1, nodes: [{id: head, head: {kind: features, pool: cls}}]}
        """)
    assert names(graph_of(path)) == BASE_NODES
    assert graph_of(path).node("head").loc.file.endswith("grandchild.yaml")


def test_set_applies_after_the_edits(folder):
    g = graph_of(child(folder, "insert: [{after: patch_embed, nodes: [{mlp: {hidden: '${dim}'}}]}]\n"),
                 {"dim": "32"})
    assert g.node("mlp").params.hidden == 32


# -- alternatives (`if`) that share an id -------------------------------------------------------------

ALTERNATIVES = """
archspec: 1
name: alt
params: {linear: false}
inputs:
  image: [B, 3, 32, 32]
graph:
  - id: patch_embed
    patchify: {patch: 4, dim: 64}
  - id: attn
    if: ${not linear}
    attention: {kind: sra, heads: 4, sr_ratio: 2}
  - id: attn
    if: ${linear}
    attention: {kind: linear_sra, heads: 4}
  - id: mlp
    mlp: {ratio: 2}
"""


@pytest.fixture
def alternatives(tmp_path) -> Path:
    write(tmp_path / "alt.yaml", ALTERNATIVES)
    return tmp_path


def edited_alternatives(folder: Path, edits: str) -> Path:
    return write(folder / "c.yaml", "extends: alt.yaml\nname: c\n" + textwrap.dedent(edits).lstrip("\n"))


def test_a_path_names_every_alternative_remove_removes_them_all(alternatives):
    g = graph_of(edited_alternatives(alternatives, "remove: [attn]\n"))
    assert names(g) == ["patch_embed", "mlp"]


def test_the_replacement_takes_the_place_of_all_alternatives(alternatives):
    path = edited_alternatives(alternatives, "replace:\n  attn: {attention: {kind: global, heads: 2}}\n")
    for linear in ("false", "true"):
        g = graph_of(path, {"linear": linear})
        assert names(g) == ["patch_embed", "attn", "mlp"] and g.node("attn").op.kind == "global"


def test_insert_goes_before_the_first_alternative_and_after_the_last(alternatives):
    path = edited_alternatives(alternatives, """
        insert:
          - {before: attn, nodes: [{id: pre, norm: {}}]}
          - {after: attn, nodes: [{id: post, norm: {}}]}
        """)
    doc = compose(load_file(str(path)))
    assert [node.get("id") for node in doc.data["graph"]] == ["patch_embed", "pre", "attn", "attn", "post", "mlp"]
    for linear in ("false", "true"):
        assert names(graph_of(path, {"linear": linear})) == ["patch_embed", "pre", "attn", "post", "mlp"]


def test_a_path_through_alternative_groups_edits_each_of_them(tmp_path):
    write(tmp_path / "groups.yaml", """
        archspec: 1
        name: groups
        params: {deep: false}
        inputs:
          x: {shape: [B, 16, 8], grid: [4, 4]}
        graph:
          - id: body
            if: ${not deep}
            graph:
              - {id: ffn, mlp: {ratio: 2}}
          - id: body
            if: ${deep}
            graph:
              - {id: ffn, mlp: {ratio: 2}}
              - {id: ffn2, mlp: {ratio: 2}}
        """)
    path = write(tmp_path / "c.yaml", "extends: groups.yaml\nname: c\nreplace:\n  body.ffn: {mlp: {ratio: 4}}\n")
    for deep, expected in (("false", ["body.ffn"]), ("true", ["body.ffn", "body.ffn2"])):
        g = graph_of(path, {"deep": deep})
        assert names(g) == expected and g.node("body.ffn").params.ratio == 4.0


# -- positions ---------------------------------------------------------------------------------------


def test_an_error_in_an_inserted_node_points_into_the_child(folder):
    path = child(folder, """
        insert:
          - before: stages.attn
            nodes:
              - attention: {kind: global, heads: 5}
        """)
    message, _, file, line, col = problem(path)
    assert (message, file, line, col) == ("5 heads do not divide the width 64", "child.yaml", 7, 42)


def test_an_error_in_a_base_node_points_into_the_base_after_the_shift(folder):
    path = child(folder, """
        params: {dim: 66}
        insert:
          - before: patch_embed
            nodes: [{id: first, patchify: {patch: 1, dim: 3}}]
          - before: stages.attn
            nodes: [{id: pre, norm: {}}]
        remove: [norm]
        """)
    doc = compose(load_file(str(path)))
    assert doc.loc(("graph", 2, "graph", 1, "attention", "heads")) == Loc(str(folder / "base.yaml"), 12, 42)
    message, _, file, line, col = problem(path)
    assert (message, file, line, col) == ("4 heads do not divide the width 66", "base.yaml", 12, 42)


def test_an_expression_in_an_inserted_node_is_located_inside_its_quotes(folder):
    path = child(folder, "insert: [{after: head, nodes: [{norm: {eps: '${1 / 0}'}}]}]\n")
    message, _, file, line, col = problem(path)
    text = path.read_text().splitlines()[line - 1]
    assert file == "child.yaml" and line == 4 and text[col - 1:].startswith("1 / 0")
    assert "division by zero" in message


def test_a_replacing_node_carries_the_childs_positions(folder):
    path = child(folder, "replace:\n  stages.mlp:\n    mlp: {ratio: 2, act: gleu}\n")
    message, hint, file, line, col = problem(path)
    assert (file, line, col) == ("child.yaml", 6, 26) and "act" in message


def test_a_removed_node_that_is_still_read_is_an_unknown_node_in_the_base(folder):
    write(folder / "skip.yaml", BASE.replace("  - id: head\n", "  - id: head\n    from: stages.mlp\n"))
    path = write(folder / "c.yaml", "extends: skip.yaml\nname: c\nremove: [stages.mlp]\n")
    with pytest.raises(SpecError) as info:
        graph_of(path)
    (d,) = info.value.diagnostics
    assert (d.message, d.path, d.loc) == ("'stages' has no member 'mlp' (it has attn)", "head",
                                          Loc(str(folder / "skip.yaml"), 18, 11))


# -- errors ------------------------------------------------------------------------------------------


def test_unknown_node(folder):
    assert problem(child(folder, "remove: [haed]\n")) == (
        "unknown node 'haed' in the base graph", "did you mean 'head'?", "child.yaml", 4, 10)


def test_unknown_node_in_a_group(folder):
    assert problem(child(folder, "replace:\n  stages.mpl: {norm: {}}\n")) == (
        "unknown node 'stages.mpl' in the base graph", "did you mean 'stages.mlp'?", "child.yaml", 5, 3)
    assert problem(child(folder, "remove: [stage.mlp]\n"))[1] == "did you mean 'stages.mlp'?"
    assert problem(child(folder, "remove: [mlp]\n"))[1] == "did you mean 'stages.mlp'?"  # the group left out


def test_unknown_node_without_a_close_name_lists_what_is_there(folder):
    assert problem(child(folder, "insert: [{after: stages.zzz, nodes: [{norm: {}}]}]\n")) == (
        "unknown node 'stages.zzz' in the base graph", "'stages' holds attn, mlp", "child.yaml", 4, 18)
    assert problem(child(folder, "remove: [zzz]\n"))[1] == "the base graph has patch_embed, stages, norm, norm_1, head"


def test_every_unknown_path_is_reported(folder):
    found = problems(child(folder, """
        remove: [haed]
        replace:
          stages.mpl: {norm: {}}
        insert:
          - {after: nrom, nodes: [{norm: {}}]}
        """))
    assert [(message, line) for message, _, _, line, _ in found] == [
        ("unknown node 'haed' in the base graph", 4), ("unknown node 'stages.mpl' in the base graph", 6),
        ("unknown node 'nrom' in the base graph", 8)]


def test_paths_do_not_go_into_a_node_that_is_not_a_group(folder):
    assert problem(child(folder, "remove: [head.pool]\n")) == (
        "'head' is not an inline group (`graph:`): it has no nodes to name", None, "child.yaml", 4, 10)


def test_paths_do_not_go_into_blocks_nor_repetitions(tmp_path):
    path = write(tmp_path / "c.yaml", f"""
        extends: {ROOT / "specs" / "swin_t.yaml"}
        name: c
        remove: [stages.blocks.attn, stages.0.downsample]
        """)
    assert problems(path) == [
        ("'stages.blocks' uses block 'swin_block': paths do not go into blocks",
         "to change its nodes, redefine 'swin_block' under `blocks:`", "c.yaml", 3, 10),
        ("unknown node 'stages.0.downsample' in the base graph",
         "a repeated node is one node in the spec: 'stages.downsample' names it in every copy", "c.yaml", 3, 30)]


def test_a_repeated_group_is_one_node_whose_members_are_edited_in_every_copy(tmp_path):
    path = write(tmp_path / "c.yaml", f"""
        extends: {VIT_B16}
        name: c
        params: {{depth: 2}}
        replace:
          blocks.mlp: {{mlp: {{ratio: 2.0, norm_eps: 1.0e-6}}}}
        """)
    g = graph_of(path)
    assert [g.node(f"blocks.{i}.mlp").params.ratio for i in range(2)] == [2.0, 2.0]


def test_edits_need_extends(tmp_path):
    path = write(tmp_path / "alone.yaml", """
        archspec: 1
        name: alone
        inputs:
          x: [B, 8]
        graph:
          - norm: {}
        remove: [norm]
        insert: [{after: norm, nodes: [{norm: {}}]}]
        """)
    hint = "add `extends: <base>.yaml`, or write the nodes into `graph:`"
    assert problems(path) == [
        ("`remove` edits the graph of an extended spec, and this spec has no `extends`", hint, "alone.yaml", 7, 1),
        ("`insert` edits the graph of an extended spec, and this spec has no `extends`", hint, "alone.yaml", 8, 1)]


def test_edits_need_extends_in_a_base_too(folder):
    write(folder / "base.yaml", BASE + "remove: [head]\n")
    assert problem(child(folder, "remove: [norm]\n"))[2:] == ("base.yaml", 19, 1)


def test_edits_and_a_graph_of_ones_own(folder):
    path = child(folder, """
        graph:
          - norm: {}
        replace:
          head: {norm: {}}
        insert: [{after: norm, nodes: [{norm: {}}]}]
        """)
    assert problem(path) == (
        "`replace` and `insert` edit the base's graph, but this spec gives its own `graph`",
        "drop `graph` to edit the base's graph, or drop `replace` and `insert` to replace it whole",
        "child.yaml", 6, 1)


def test_an_insert_goes_before_or_after(folder):
    path = child(folder, """
        insert:
          - {before: norm, after: norm, nodes: [{norm: {}}]}
          - nodes: [{norm: {}}]
        """)
    assert problems(path) == [
        ("an insert goes `before` a node or `after` one, not both", "split it into two inserts", "child.yaml", 5, 20),
        ("an insert needs `before` or `after`: the node it goes next to", "e.g. `- {after: head, nodes: [...]}`",
         "child.yaml", 6, 5)]


def test_removing_every_node_of_a_group(folder):
    assert problem(child(folder, "remove: [stages.attn, stages.mlp]\n")) == (
        "`remove` removes every node of 'stages'", "remove 'stages' itself", "child.yaml", 4, 23)


def test_removing_every_node_of_the_graph(folder):
    assert problem(child(folder, "remove: [head, norm, norm_1, stages, patch_embed]\n")) == (
        "`remove` removes every node of the base graph",
        "keep at least one node, or give this spec its own `graph:`", "child.yaml", 4, 38)


def test_replacing_a_node_and_one_inside_it(folder):
    path = child(folder, "replace:\n  stages: {graph: [{norm: {}}]}\n  stages.attn: {norm: {}}\n")
    assert problem(path) == ("'stages.attn' lies inside 'stages', which `replace` also replaces",
                             "write the change into the node that replaces 'stages'", "child.yaml", 6, 3)


@pytest.mark.parametrize("edits, expected", [
    ("remove: head\n", ("`remove` must be a list; got 'head'", 4, 9)),
    ("replace: {head: 3}\n", ("`replace.head` must be a mapping; got 3", 4, 17)),
    ("insert: [{after: head}]\n", ("missing required `insert.0.nodes` in the spec", 4, 10)),
    ("insert: [{after: head, nodes: []}]\n", ("`insert.0.nodes` must not be empty", 4, 31)),
])
def test_the_form_of_the_edits_is_checked_where_they_are_written(folder, edits, expected):
    message, _, file, line, col = problem(child(folder, edits))
    assert (message, line, col) == expected and file == "child.yaml"


def test_a_base_without_a_graph(folder):
    write(folder / "params_only.yaml", "archspec: 1\nname: p\nparams: {dim: 8}\n")
    path = write(folder / "c.yaml", "extends: params_only.yaml\nname: c\nremove: [head]\n")
    assert problem(path) == ("`remove`: params_only.yaml has no graph to edit", "give this spec its own `graph:`",
                             "c.yaml", 3, 1)


# -- the shipped ViT-B/16, edited ----------------------------------------------------------------------


def test_vit_b16_without_its_head_returns_features(tmp_path):
    path = write(tmp_path / "vit_features.yaml", f"""
        extends: {VIT_B16}
        name: vit_b16_features
        remove: [head]
        outputs: {{features: norm}}
        """)
    report = archspec.check(str(path))
    assert report.params == VIT_B16_PARAMS - VIT_B16_HEAD_PARAMS == 85_798_656
    assert list(report.outputs) == ["features"] and list(report.outputs["features"].shape[1:]) == [197, 768]
    assert [row.path for row in report.nodes][-2:] == ["blocks.11.mlp", "norm"]


def test_vit_b16_with_a_features_head_in_place_of_the_classifier(tmp_path):
    path = write(tmp_path / "vit_pooled.yaml", f"""
        extends: {VIT_B16}
        name: vit_b16_pooled
        replace:
          head:
            head: {{kind: features, pool: cls}}
        """)
    report = archspec.check(str(path))
    assert report.params == VIT_B16_PARAMS - VIT_B16_HEAD_PARAMS
    assert list(report.outputs["output"].shape[1:]) == [768] and report.nodes[-1].path == "head"


def test_vit_b16_with_a_norm_after_the_patch_embedding(tmp_path):
    path = write(tmp_path / "vit_prenorm.yaml", f"""
        extends: {VIT_B16}
        name: vit_b16_prenorm
        insert:
          - after: patch_embed
            nodes:
              - id: pre_norm
                norm: {{eps: "${{eps}}"}}
        """)
    report = archspec.check(str(path))
    assert report.params == VIT_B16_PARAMS + 2 * 768
    assert [row.path for row in report.nodes][:3] == ["patch_embed", "pre_norm", "blocks.0.attn"]
    assert report.graph.node("blocks.0.attn").inputs == ("pre_norm",)
    assert report.graph.node("pre_norm").params.eps == 1.0e-6


def test_an_input_given_null_under_extends_is_removed(tmp_path):
    """The Q-Former trial could not drop its base's `query_embeds` input for learned queries: the
    extending spec's model still asked for it. `inputs: {query_embeds: ~}` removes it; a graph
    that still reads it is a located error in the base."""
    (tmp_path / "base.yaml").write_text("""
name: base
inputs:
  queries: [B, 8, 32]
  image: [B, 10, 32]
graph:
  - {id: attn, from: queries, attention: {kind: global, heads: 2}}
  - {id: cross, from: [attn, image], attention: {kind: cross, heads: 2}}
""")
    (tmp_path / "learned.yaml").write_text("""
extends: base.yaml
name: learned
inputs:
  queries: ~
graph:
  - {id: learned, param: {shape: [8, 32]}}
  - {id: attn, from: learned, attention: {kind: global, heads: 2}}
  - {id: cross, from: [attn, image], attention: {kind: cross, heads: 2}}
""")
    report = archspec.check(str(tmp_path / "learned.yaml"))
    assert [i.name for i in report.graph.inputs()] == ["image"]
    (tmp_path / "dangling.yaml").write_text("extends: base.yaml\nname: dangling\ninputs:\n  queries: ~\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check(str(tmp_path / "dangling.yaml"))
    assert "unknown node 'queries'" in info.value.message and info.value.loc.file.endswith("base.yaml")
