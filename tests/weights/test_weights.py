"""Weight import through mapping files (compiler/weights/, specs/mappings/).

Each rule kind on small synthetic state dicts; every shipped mapping file loads and the specs
name them (directly or through `extends`); a bad mapping file is one located diagnostic; a
checkpoint that fits no naming names the closest by key overlap; `--map` and `mapping=` load a
checkpoint in a user's own naming into a small ViT with the same outputs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import archspec
from archspec.cli.main import main
from archspec.compiler.weights.fit import best_fit
from archspec.compiler.weights.load import SpecParams, load_weights
from archspec.compiler.weights.mapping_file import read_mapping_file
from archspec.compiler.weights.naming import ARCHSPEC
from archspec.compiler.weights.checkpoint import read_state_dict

from tests.conftest import ROOT, perturb_constants

MAPPINGS = sorted((ROOT / "specs" / "mappings").glob("*.yaml"))
VIT = str(ROOT / "specs" / "vit_b16.yaml")
SMALL = {"depth": 2, "dim": 64, "heads": 2, "img": 64}
SHRINK = [arg for key, value in SMALL.items() for arg in ("--set", f"{key}={value}")]


def mapping(tmp_path: Path, text: str, name: str = "map.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return read_mapping_file(path)


def convert(tmp_path: Path, rules: str, state: dict) -> dict:
    naming = mapping(tmp_path, "name: test\nrules:\n" + textwrap.indent(textwrap.dedent(rules), "  "))
    return naming.convert(state).state


def shapes(state: dict) -> dict:
    return {key: tuple(value.shape) for key, value in state.items()}


def small_vit(seed: int = 0):
    return archspec.build(VIT, SMALL, seed=seed).eval()


# -- the rule kinds ------------------------------------------------------------------------------


def test_rename_takes_the_first_pattern_that_matches_and_replaces_only_the_match(tmp_path):
    state = {"attn.norm.weight": torch.zeros(1), "norm1.weight": torch.zeros(2), "other": torch.zeros(3)}
    out = convert(tmp_path, r"""
        - rename:
            '^attn\.norm\.': attn.sr_norm.
            '^norm1\.': attn.norm.
            '(\w+)\.weight$': '\1.w'
        """, state)
    assert shapes(out) == {"attn.sr_norm.weight": (1,), "attn.norm.weight": (2,), "other": (3,)}


def test_renames_in_two_rules_apply_one_after_the_other(tmp_path):
    out = convert(tmp_path, r"""
        - rename: {'^vision_model\.layers\.': visual.blocks.}
        - rename: {'^visual\.blocks\.(\d+)\.ln1\.': 'visual.blocks.\1.attn.norm.'}
        """, {"vision_model.layers.3.ln1.bias": torch.zeros(4)})
    assert list(out) == ["visual.blocks.3.attn.norm.bias"]


def test_fuse_concatenates_the_parts_in_order(tmp_path):
    q, k, v = torch.full((2, 3), 1.0), torch.full((2, 3), 2.0), torch.full((2, 3), 3.0)
    state = {"l.0.attn.v.weight": v, "l.0.attn.q.weight": q, "l.0.attn.k.weight": k, "l.0.attn.q.bias": q[0],
             "l.0.attn.k.bias": k[0], "l.0.attn.v.bias": v[0], "l.0.mlp.weight": q}
    out = convert(tmp_path, r"""
        - fuse: {match: '^(.*\.attn)\.{part}\.(weight|bias)$', parts: [q, k, v], into: qkv}
        """, state)
    assert shapes(out) == {"l.0.mlp.weight": (2, 3), "l.0.attn.qkv.weight": (6, 3), "l.0.attn.qkv.bias": (9,)}
    assert torch.equal(out["l.0.attn.qkv.weight"], torch.cat([q, k, v]))


def test_fuse_along_another_dim_and_an_incomplete_group_stays(tmp_path):
    cls, dist = torch.ones(1, 1, 4), torch.zeros(1, 1, 4)
    rules = r"""
        - fuse: {match: '^{part}$', parts: [cls_token, dist_token], into: patch_embed.cls_token, dim: 1}
        """
    out = convert(tmp_path, rules, {"cls_token": cls, "dist_token": dist})
    assert torch.equal(out["patch_embed.cls_token"], torch.cat([cls, dist], dim=1))
    assert list(convert(tmp_path, rules, {"cls_token": cls})) == ["cls_token"]  # no dist_token: left as it is


def test_split_by_shares_sizes_or_equal_parts(tmp_path):
    in_proj = torch.arange(12.0).reshape(6, 2)
    by_shares = convert(tmp_path, r"""
        - split: {match: '^l\.(\d+)\.in_proj$', into: ['l.\1.q', 'l.\1.kv'], shares: [1, 2]}
        """, {"l.0.in_proj": in_proj})
    assert torch.equal(by_shares["l.0.q"], in_proj[:2]) and torch.equal(by_shares["l.0.kv"], in_proj[2:])
    by_sizes = convert(tmp_path, "- split: {match: 'w', into: [a, b], sizes: [1, 5]}\n", {"w": in_proj})
    assert shapes(by_sizes) == {"a": (1, 2), "b": (5, 2)}
    equal = convert(tmp_path, "- split: {match: 'w', into: [a, b], dim: 1}\n", {"w": in_proj})
    assert shapes(equal) == {"a": (6, 1), "b": (6, 1)}
    uneven = convert(tmp_path, "- split: {match: 'w', into: [a, b, c, d]}\n", {"w": in_proj})
    assert shapes(uneven) == {"w": (6, 2)}  # 6 rows do not cut in four: left as it is


def test_transpose_turns_only_matching_2d_tensors(tmp_path):
    state = {"h.0.attn.c_attn.weight": torch.randn(4, 12), "h.0.attn.c_attn.bias": torch.randn(12),
             "wte.weight": torch.randn(5, 4)}
    out = convert(tmp_path, r"""
        - transpose: ['\.c_attn\.(weight|bias)$']
        """, state)
    assert shapes(out) == {"h.0.attn.c_attn.weight": (12, 4), "h.0.attn.c_attn.bias": (12,), "wte.weight": (5, 4)}
    assert torch.equal(out["h.0.attn.c_attn.weight"], state["h.0.attn.c_attn.weight"].t())


def test_reshape_with_own_sizes_or_minus_one(tmp_path):
    out = convert(tmp_path, r"""
        - reshape: {match: '^cls$', shape: [1, 1, '*']}
        - reshape: {match: '^pos$', shape: [1, '*']}
        - reshape: {match: '^flat$', shape: [2, -1]}
        - reshape: {match: '^odd$', shape: [4, -1]}
        """, {"cls": torch.zeros(8), "pos": torch.zeros(5, 8), "flat": torch.zeros(6), "odd": torch.zeros(6)})
    assert shapes(out) == {"cls": (1, 1, 8), "pos": (1, 5, 8), "flat": (2, 3), "odd": (6,)}


def test_a_rule_that_cannot_apply_says_which_tensor_and_why(tmp_path):
    naming = mapping(tmp_path, r"""
        name: test
        rules:
          - reshape: {match: '^odd$', shape: [4, -1]}
          - split: {match: '^w$', into: [a, b, c, d]}
          - split: {match: '^v$', into: [a, b], dim: 2}
          - fuse: {match: '^{part}$', parts: [cls_token, dist_token], into: both}
        """)
    converted = naming.convert({"odd": torch.zeros(6), "w": torch.zeros(6, 2), "v": torch.zeros(6, 2),
                                "cls_token": torch.zeros(1, 1, 4), "fine": torch.zeros(2)})
    assert set(converted.state) == {"odd", "w", "v", "cls_token", "fine"}  # each left as it was
    assert [line.replace(f"{tmp_path}/", "") for line in converted.refused] == [
        "the reshape rule (map.yaml:3:5) left odd as it was: [6] (6 values) cannot take [4, -1]",
        "the split rule (map.yaml:4:5) left w as it was: dim 0 of [6, 2] does not cut by shares [1, 1, 1, 1]",
        "the split rule (map.yaml:5:5) left v as it was: [6, 2] has no dim 2 to cut by shares [1, 1]",
        "the fuse rule (map.yaml:6:5) left cls_token as it was: no dist_token beside cls_token"]


def test_the_load_error_names_the_rule_that_could_not_apply(tmp_path):
    model = small_vit()
    state = {key: value.clone() for key, value in model.state_dict().items()}
    qkv = "blocks.0.attn.qkv.weight"
    state[qkv] = state[qkv].reshape(-1)  # a checkpoint storing it flat, and a rule that gets its shape wrong
    path = tmp_path / "flat.yaml"
    path.write_text(f"name: flat\nrules:\n  - reshape: {{match: 'qkv\\.weight$', shape: [7, -1]}}\n")
    with pytest.raises(Exception) as info:
        load_weights(model, state, None, mappings=[str(path)])
    assert f"the reshape rule ({path}:3:5) left {qkv} as it was: [12288] (12288 values) cannot take [7, -1]" \
        in str(info.value)


def test_drop_leaves_matching_tensors_out(tmp_path):
    out = convert(tmp_path, r"""
        - drop: ['relative_position_index$', '\.position_ids$']
        """, {"a.relative_position_index": torch.zeros(1), "e.position_ids": torch.zeros(1), "b": torch.zeros(1)})
    assert list(out) == ["b"]


def test_keep_spares_our_tensors_the_checkpoint_lacks(tmp_path):
    naming = mapping(tmp_path, """
        name: no embeddings
        keep: ['^embed\\.']
        """)
    ours = {"embed.weight": torch.zeros(3, 2), "fc.weight": torch.zeros(2, 2)}
    fit = best_fit({"fc.weight": torch.ones(2, 2)}, ours, [ARCHSPEC, naming])
    assert fit.naming == "no embeddings" and fit.kept == ["embed.weight"] and not fit.problems


def test_identify_keeps_a_naming_off_other_checkpoints(tmp_path):
    naming = mapping(tmp_path, """
        name: needs cls
        identify: ['^cls_token$', '^blocks\\.0\\.']
        """)
    assert naming.applies_to({"cls_token": 0, "blocks.0.w": 0})
    assert not naming.applies_to({"cls_token": 0, "blocks.1.w": 0})


def test_two_tensors_mapped_to_one_name_do_not_fit(tmp_path):
    naming = mapping(tmp_path, """
        name: clash
        rules:
          - rename: {'^(a|b)$': c}
        """)
    ours = {"c": torch.zeros(1)}
    with pytest.raises(archspec.SpecError) as caught:
        best_fit({"a": torch.zeros(1), "b": torch.zeros(1)}, ours, [ARCHSPEC, naming])
    assert "closest naming: clash" in str(caught.value) and "1 mapped to twice (c)" in str(caught.value)


def test_a_tensor_of_the_models_size_in_another_shape_is_hinted_a_reshape_rule(tmp_path):
    """The ViViT trial: a Conv3d weight [8, 3, 2, 2, 2] where the model has a linear's [8, 24]."""
    naming = mapping(tmp_path, """
        name: video
        rules:
          - rename: {'^patch\\.': 'proj.'}
        """)
    ours = {"proj.weight": torch.zeros(8, 24)}
    for users_gave_a_mapping, ask in ((False, "give a mapping file (--map FILE"), (True, "Mend your mapping file's")):
        with pytest.raises(archspec.SpecError) as caught:
            best_fit({"patch.weight": torch.zeros(8, 3, 2, 2, 2)}, ours, [ARCHSPEC, naming],
                     users_gave_a_mapping=users_gave_a_mapping)
        hint = caught.value.diagnostics[0].hint
        assert "proj.weight under video holds the model's number of values in another shape: a `reshape` rule" in hint
        assert ask in hint, hint
    with pytest.raises(archspec.SpecError) as caught:
        best_fit({"patch.weight": torch.zeros(8, 3, 2, 2)}, ours, [ARCHSPEC, naming])
    assert "reshape" not in caught.value.diagnostics[0].hint  # 48 values are not 24


# -- the shipped mapping files -------------------------------------------------------------------


def read_shipped(path: Path):
    """A shipped mapping file read as a load reads it: with the params of the first shipped spec
    that names it (a rule may read them, `${heads}`)."""
    for spec in sorted((ROOT / "specs").glob("*.yaml")):
        named = archspec.check(str(spec)).graph.mappings
        if any(Path(m).resolve() == path.resolve() for m in named):
            return read_mapping_file(path, params=SpecParams(None, str(spec)))
    return read_mapping_file(path)


@pytest.mark.parametrize("path", MAPPINGS, ids=lambda p: p.stem)
def test_every_mapping_file_loads(path):
    naming = read_shipped(path)
    assert naming.name and naming.rules and naming.identify and naming.file == str(path)


def test_mapping_names_are_distinct():
    names = [read_shipped(path).name for path in MAPPINGS]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("spec, expected", [
    ("vit_b16", "timm_vit"), ("vit_s16", "timm_vit"), ("vit_ti16", "timm_vit"),
    ("swin_t", "timm_swin"), ("swin_s", "timm_swin"), ("swin_b", "timm_swin"), ("swinv2_t", "timm_swin"),
    ("pvt_v2_b0", "timm_pvt_v2"), ("pvt_v2_b2", "timm_pvt_v2"), ("pvt_v2_b2_li", "timm_pvt_v2"),
    ("pvt_v1_tiny", "hf_pvt"), ("clip_vit_b32", "hf_clip"), ("transformer_base", "torch_transformer"),
])
def test_specs_name_their_mappings_and_extends_inherits_them(spec, expected):
    report = archspec.check(str(ROOT / "specs" / f"{spec}.yaml"))
    assert [Path(p).resolve() for p in report.graph.mappings] == [ROOT / "specs" / "mappings" / f"{expected}.yaml"]


# -- a bad mapping file: one located diagnostic ----------------------------------------------------

BAD = [
    ("bad regex", """
        name: x
        rules:
          - rename:
              '^blocks\\.(\\d+\\.': a
        """, "map.yaml:4:7: error: pattern '^blocks\\.(\\d+\\.' is not a valid regular expression: "
             "missing ), unterminated subpattern at position 9",
     "patterns are Python regular expressions searched in each key; anchor them with ^ and $"),
    ("unknown rule", """
        name: x
        rules:
          - renam: {a: b}
        """, "map.yaml:3:5: error: unknown rule 'renam'", "did you mean 'rename'?"),
    ("two kinds", """
        name: x
        rules:
          - rename: {a: b}
            drop: [c]
        """, "map.yaml:4:5: error: a rule has one kind; this one has rename and drop",
     "make each its own item of `rules` (they apply in order)"),
    ("group the pattern lacks", """
        name: x
        rules:
          - rename: {'^a\\.(\\d+)': 'b.\\2'}
        """, "map.yaml:3:27: error: replacement 'b.\\2': invalid group reference 2",
     "the pattern has 1 group; \\1 is the first group's text, \\g<name> a named group's, \\\\ a backslash"),
    ("fuse without part", """
        name: x
        rules:
          - fuse:
              match: '^(.*)\\.q\\.weight$'
              parts: [q, k, v]
              into: qkv
        """, "map.yaml:4:14: error: fuse: `match` must hold {part} once, where the parts differ; "
             "got '^(.*)\\.q\\.weight$'",
     "e.g. match: '^(.*\\.self_attn)\\.{part}\\.(weight|bias)$' with parts: [q_proj, k_proj, v_proj]"),
    ("unknown key in a rule", """
        name: x
        rules:
          - split: {match: w, into: [a, b], share: [1, 2]}
        """, "map.yaml:3:37: error: unknown key 'share' in the split rule", "did you mean 'shares'?"),
    ("shares for the wrong count", """
        name: x
        rules:
          - split: {match: w, into: [a, b], shares: [1, 2, 3]}
        """, "map.yaml:3:45: error: split: `shares` has 3 entries for 2 targets in `into`",
     "give one entry of `shares` per name in `into`"),
    ("split into one", """
        name: x
        rules:
          - split: {match: w, into: [a]}
        """, "map.yaml:3:29: error: split: `into` has 1 name; a split needs two or more", None),
    ("empty", """
        # nothing yet
        """, "map.yaml:1:1: error: the mapping file is empty", "start with `name:` and `rules:`"),
    ("lookahead", """
        name: x
        identify: ['^a(?=b)']
        """, "map.yaml:2:12: error: pattern '^a(?=b)' cannot be matched in linear time: invalid perl operator: (?=",
     "patterns are matched in linear time, which rules out lookahead and lookbehind, backreferences, "
     "atomic groups and possessive repeats; \\Z is written $"),
    ("unknown key", """
        name: x
        drop_me: 1
        """, "map.yaml:2:1: error: unknown key 'drop_me' in the mapping file",
     "allowed keys: archspec, name, doc, identify, rules, keep"),
    ("no name", """
        rules: []
        """, "map.yaml:1:1: error: missing required `name` in the mapping file", None),
    ("a spec", """
        name: x
        inputs: {image: [B, 3, 8, 8]}
        graph: [{norm: {}}]
        """, "map.yaml:1:1: error: this is a spec, not a mapping file",
     "a mapping file holds `name`, `identify`, `rules` and `keep`; see specs/mappings/README.md"),
]


@pytest.mark.parametrize("text, headline, hint", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_a_bad_mapping_file_is_one_located_diagnostic(tmp_path, text, headline, hint):
    with pytest.raises(archspec.SpecError) as caught:
        mapping(tmp_path, text)
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.text().replace(str(tmp_path) + "/", "") == headline + (f"\n  hint: {hint}" if hint else "")


def test_a_pattern_longer_than_the_bound_is_refused(tmp_path):
    with pytest.raises(archspec.SpecError) as caught:
        mapping(tmp_path, f"name: x\nkeep: ['{'a' * 301}']\n")
    assert caught.value.message == "pattern is 301 characters long; at most 300 are allowed"
    assert (caught.value.loc.line, caught.value.loc.col) == (2, 8)


def test_a_yaml_problem_in_a_mapping_file_is_located(tmp_path):
    with pytest.raises(archspec.SpecError) as caught:
        mapping(tmp_path, "name: x\nrules:\n  - drop: [a\n")
    assert caught.value.message.startswith("YAML syntax:") and caught.value.loc.file.endswith("map.yaml")


# -- choosing a naming; a checkpoint that fits none ---------------------------------------------------


def timm_vit(**kwargs):
    timm = pytest.importorskip("timm")
    settings = {"depth": 2, "embed_dim": 64, "num_heads": 2, "img_size": 64, **kwargs}
    return perturb_constants(timm.create_model("vit_base_patch16_224", pretrained=False, **settings).eval())


def test_the_spec_mapping_loads_timm_with_and_without_the_graph():
    reference = timm_vit()
    x = torch.randn(2, 3, 64, 64)
    model = archspec.build(VIT, SMALL, weights=reference.state_dict())  # the spec's `mappings:` via its graph
    unbuilt = small_vit()
    fit = load_weights(unbuilt, reference.state_dict())  # no graph: the spec file the model was built from
    assert fit.naming == "timm vit"
    with torch.no_grad():
        assert torch.allclose(model.eval()(x), reference(x), atol=1e-5)
        assert torch.equal(unbuilt(x), model(x))


def test_a_timm_checkpoint_made_for_other_params_names_timm_as_closest():
    narrower = timm_vit(embed_dim=32)
    with pytest.raises(archspec.SpecError) as caught:
        load_weights(small_vit(), narrower.state_dict())
    text = str(caught.value)
    assert ("closest naming: timm vit, under which 30 of 30 (100%) of the checkpoint's tensors have the model's names"
            in text)
    assert "blocks.0.attn.qkv.weight (96, 32) (model has (192, 64))" in text
    assert caught.value.hint.startswith("namings tried (of the checkpoint's tensors each naming keeps, after its "
                                        "renames and drops, those the model has): timm vit 30 of 30 (100%), archspec "
                                        "20 of 32 (62.5%);")
    assert f"hint: {caught.value.hint}" in text  # str() carries the hint


def test_a_tensor_with_the_models_sizes_in_another_order_is_hinted_a_permute_not_a_reshape(tmp_path):
    """The Switch trial: stacked experts stored [E, hidden, C] where the model holds [E, C, hidden];
    the hint said `reshape`, which loaded them scrambled without a word (logits 2.59 off)."""
    naming = mapping(tmp_path, """
        name: experts
        rules:
          - rename: {'^wi$': 'mlp.experts.fc1'}
        """)
    ours = {"mlp.experts.fc1": torch.zeros(4, 64, 128)}
    with pytest.raises(archspec.SpecError) as caught:
        best_fit({"wi": torch.zeros(4, 128, 64)}, ours, [ARCHSPEC, naming])
    hint = caught.value.diagnostics[0].hint
    assert "holds the model's sizes with the axes in another order" in hint and "`permute` rule" in hint, hint
    assert "a `reshape` rule turns" not in hint


def test_a_permuted_experts_tensor_names_its_square_sibling_which_no_shape_can_show(tmp_path):
    """The GraniteMoE trial: experts_layout wrong, so fc2 [E, I, H] came as [E, H, I] and fc1
    [E, 2I, H] (2I = H) loaded transposed without a word; permuting fc2 alone, as the hint said,
    built a model 5.6e-4 off. The hint now names fc1 and the layout option that fixes both."""
    naming = mapping(tmp_path, """
        name: experts
        rules:
          - rename: {'^w1$': 'mlp.experts.fc1', '^w2$': 'mlp.experts.fc2'}
        """)
    ours = {"mlp.experts.fc1": torch.zeros(4, 64, 64), "mlp.experts.fc2": torch.zeros(4, 64, 32)}
    with pytest.raises(archspec.SpecError) as caught:
        best_fit({"w1": torch.zeros(4, 64, 64), "w2": torch.zeros(4, 32, 64)}, ours, [ARCHSPEC, naming])
    hint = caught.value.diagnostics[0].hint
    assert "mlp.experts.fc2 under experts holds the model's sizes with the axes in another order" in hint, hint
    assert "mlp.experts.fc1 beside them is square" in hint and "`experts_layout`" in hint, hint


def test_a_checkpoint_in_our_naming_with_problems_names_archspec():
    state = small_vit().state_dict()
    del state["head.fc.bias"]
    with pytest.raises(archspec.SpecError) as caught:
        load_weights(small_vit(), state)
    assert "closest naming: archspec" in str(caught.value) and "1 missing (head.fc.bias)" in str(caught.value)
    assert "not tried, the checkpoint lacks the keys that identify them: timm vit" in caught.value.hint


def test_a_spec_naming_a_missing_mapping_file_says_so(tmp_path):
    spec = tmp_path / "vit.yaml"
    spec.write_text(Path(VIT).read_text().replace("mappings/timm_vit.yaml", "nowhere.yaml"))
    warned = archspec.check(str(spec), SMALL).warnings[0]  # a warning at check: only a load needs the file
    assert warned.message == "no such mapping file: nowhere.yaml" and warned.severity == "warning"
    archspec.build(str(spec), SMALL, weights=small_vit().state_dict())  # archspec's naming fits without it
    renamed = {f"other.{key}": value for key, value in small_vit().state_dict().items()}
    with pytest.raises(archspec.SpecError) as caught:  # no naming fits: the load names the missing file first
        archspec.build(str(spec), SMALL, weights=renamed)
    diag = caught.value.diagnostics[0]
    assert diag.message == "no such mapping file: nowhere.yaml" and diag.loc.file == str(spec)
    assert "relative to the folder of" in diag.hint and diag.severity == "error"
    assert caught.value.diagnostics[1].message.startswith("weights do not fit this model")


# -- a user's own naming: mapping= and --map -----------------------------------------------------------

USER_MAPPING = r"""
name: my vit
identify: ['^backbone\.']
rules:
  - fuse: {match: '^(.*\.attention)\.{part}\.(weight|bias)$', parts: [query, key, value], into: qkv}
  - rename:
      '^backbone\.layer(\d+)\.attention\.': 'blocks.\1.attn.'
      '^backbone\.layer(\d+)\.': 'blocks.\1.'
      '^backbone\.': ''
      '^classifier\.': head.fc.
"""


def in_my_naming(state: dict) -> dict:
    """Our state dict renamed (backbone.layerN..., classifier) with qkv cut into query/key/value."""
    out = {}
    for key, value in state.items():
        if ".attn.qkv." in key:
            for part, piece in zip(("query", "key", "value"), value.chunk(3)):
                out[key.replace("blocks.", "backbone.layer").replace("attn.qkv", f"attention.{part}")] = piece.clone()
        elif key.startswith("head.fc."):
            out[key.replace("head.fc.", "classifier.")] = value
        else:
            out["backbone." + key.replace("blocks.", "layer").replace(".attn.", ".attention.")] = value
    return out


def test_a_user_mapping_loads_a_renamed_checkpoint_with_identical_outputs(tmp_path):
    source = perturb_constants(small_vit(seed=1))
    (tmp_path / "mine.yaml").write_text(USER_MAPPING)
    state = in_my_naming(source.state_dict())
    model = archspec.build(VIT, SMALL, seed=0, weights=state, mapping=tmp_path / "mine.yaml").eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(model(x), source(x))
    with pytest.raises(archspec.SpecError, match="closest naming: archspec"):  # without the file: no naming fits
        archspec.build(VIT, SMALL, weights=state)


DOUBLED_BIAS = r"""
name: doubled bias
identify: ['^head\.fc\.bias$']
rules:
  - affine: {match: '^head\.fc\.bias$', scale: 2.0}
"""


def test_a_user_mapping_comes_before_the_namings_that_also_fit(tmp_path):
    """The file asked for is tried first: a checkpoint in archspec's own naming, which that
    naming would load as it is, loads through the user's file when it fits (the bias doubled)."""
    (tmp_path / "doubled.yaml").write_text(DOUBLED_BIAS)
    state = perturb_constants(small_vit(seed=1)).state_dict()
    plain = archspec.build(VIT, SMALL, weights=state)
    doubled = archspec.build(VIT, SMALL, weights=state, mapping=tmp_path / "doubled.yaml")
    assert torch.equal(plain.get_parameter("head.fc.bias"), state["head.fc.bias"])
    assert torch.equal(doubled.get_parameter("head.fc.bias"), 2 * state["head.fc.bias"])
    fit = load_weights(small_vit(), state, mappings=[tmp_path / "doubled.yaml"])
    assert fit.naming == "doubled bias" and fit.warnings == []


def test_a_user_mapping_not_used_is_a_warning_saying_why(tmp_path, caplog):
    """A checkpoint that another naming loads instead of the user's file: the load says so."""
    (tmp_path / "mine.yaml").write_text(USER_MAPPING)
    state = small_vit(seed=1).state_dict()
    fit = load_weights(small_vit(), state, mappings=[tmp_path / "mine.yaml"])
    assert fit.naming == "archspec"
    assert fit.warnings == [f"your mapping {tmp_path / 'mine.yaml'} was not used: the checkpoint lacks the keys that "
                            "identify it; loaded under archspec naming instead"]
    assert f"warning: your mapping {tmp_path / 'mine.yaml'} was not used" in fit.summary()
    with caplog.at_level("WARNING", logger="archspec"):
        archspec.build(VIT, SMALL, weights=state, mapping=tmp_path / "mine.yaml")
    assert any("was not used: the checkpoint lacks the keys that identify it" in r.getMessage() for r in caplog.records)
    (tmp_path / "off.yaml").write_text("name: off\nidentify: ['^head\\.fc\\.bias$']\nrules:\n"
                                       "  - rename: {'^head\\.fc\\.bias$': head.fc.offset}\n")
    fit = load_weights(small_vit(), state, mappings=[tmp_path / "off.yaml"])
    assert fit.naming == "archspec" and fit.warnings == [
        f"your mapping {tmp_path / 'off.yaml'} was not used: under it the checkpoint has 1 missing (head.fc.bias); "
        "1 unexpected (head.fc.offset); loaded under archspec naming instead"]


def test_mapping_files_that_share_a_name_are_told_apart_by_their_file(tmp_path):
    """Two files both called `name: off` (the Hiera trial copied one to make the other): the
    warnings name each by its file, not twice the same name."""
    for file, target in (("off_a.yaml", "head.fc.offset"), ("off_b.yaml", "head.fc.shift")):
        (tmp_path / file).write_text("name: off\nidentify: ['^head\\.fc\\.bias$']\nrules:\n"
                                     f"  - rename: {{'^head\\.fc\\.bias$': {target}}}\n")
    state = small_vit(seed=1).state_dict()
    fit = load_weights(small_vit(), state, mappings=[tmp_path / "off_a.yaml", tmp_path / "off_b.yaml"])
    assert fit.naming == "archspec" and len(fit.warnings) == 2
    assert "(head.fc.offset)" in fit.warnings[0] and "(head.fc.shift)" in fit.warnings[1]
    with pytest.raises(archspec.SpecError) as caught:
        load_weights(small_vit(), {"head.fc.bias": state["head.fc.bias"]},
                     mappings=[tmp_path / "off_a.yaml", tmp_path / "off_b.yaml"])
    assert "off (off_a.yaml)" in str(caught.value) and "off (off_b.yaml)" in str(caught.value), str(caught.value)


def test_the_mapping_argument_is_checked():
    with pytest.raises(TypeError, match="`mapping` must be the path of a weight mapping file"):
        archspec.build(VIT, SMALL, weights={}, mapping=3)
    with pytest.raises(archspec.UsageError, match="no `weights` were given"):
        archspec.build(VIT, SMALL, mapping="mine.yaml")
    with pytest.raises(archspec.SpecError, match="no such mapping file: nowhere.yaml"):
        archspec.build(VIT, SMALL, weights=small_vit().state_dict(), mapping="nowhere.yaml")


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_map_through_the_cli(tmp_path, capsys):
    source = perturb_constants(small_vit(seed=1))
    torch.save(in_my_naming(source.state_dict()), tmp_path / "mine.pt")
    (tmp_path / "mine.yaml").write_text(USER_MAPPING)
    code, _, err = run(capsys, "build", VIT, *SHRINK, "--target", "eager", "--weights", str(tmp_path / "mine.pt"),
                       "--map", str(tmp_path / "mine.yaml"), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert "in my vit naming" in err
    model = small_vit()
    model.load_state_dict(read_state_dict(str(tmp_path / "out" / "model.safetensors")))
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(model(x), source(x))


def test_map_usage_errors_exit_2(tmp_path, capsys):
    (tmp_path / "w.pt").write_bytes(b"")
    code, _, err = run(capsys, "build", VIT, "--weights", str(tmp_path / "w.pt"), "--map", str(tmp_path / "no.yaml"))
    assert code == 2 and f"--map: no such file: {tmp_path / 'no.yaml'}" in err
    code, _, err = run(capsys, "build", VIT, "--map", str(tmp_path / "w.pt"))
    assert code == 2 and "--map needs --weights" in err


def test_a_malformed_map_exits_1_located(tmp_path, capsys):
    torch.save(small_vit().state_dict(), tmp_path / "w.pt")
    (tmp_path / "bad.yaml").write_text("name: x\nrules:\n  - drop: ['(']\n")
    code, _, err = run(capsys, "build", VIT, *SHRINK, "--target", "eager", "--weights", str(tmp_path / "w.pt"),
                       "--map", str(tmp_path / "bad.yaml"), "-o", str(tmp_path / "out"))
    assert code == 1
    assert f"{tmp_path / 'bad.yaml'}:3:12: error: pattern '(' is not a valid regular expression" in err
    assert "Traceback" not in err


OFFSET_NORM = """name: offset_norm
inputs:
  x: [B, 4, 8]
graph:
  - {id: norm, norm: {kind: rms, offset: 1.0}}
  - {id: fc, linear: {dim: 8}}
outputs: [fc]
"""


def test_an_offset_added_by_the_mapping_and_by_the_norm_is_a_warning(tmp_path, caplog):
    """The Gemma 2 trial: mappings/README's `affine: {add: 1.0}` (w -> 1 + w) with a spec whose
    norm has norm_offset 1.0 loaded a norm scaling by 2 + w, silently (4.55 off)."""
    model = archspec.build_text(OFFSET_NORM, seed=0)
    state = {"norm.weight": torch.randn(8) * 0.1, "fc.weight": torch.randn(8, 8), "fc.bias": torch.randn(8)}
    (tmp_path / "gemma.yaml").write_text("name: gemma\nrules:\n  - affine: {match: '^norm\\.weight$', add: 1.0}\n")
    fit = load_weights(model, state, mappings=[tmp_path / "gemma.yaml"])
    assert fit.naming == "gemma"
    assert fit.warnings == ["the mapping's affine rule adds 1 to 1 norm weight(s) (norm.weight) whose norm scales by "
                            "1 + weight itself (the spec's norm_offset): they scale by 2 + w; keep one of the two (a "
                            "checkpoint storing w loads as it is into a norm with norm_offset)"]
    (tmp_path / "scaled.yaml").write_text("name: scaled\nrules:\n  - affine: {match: '^norm\\.weight$', scale: 2.0}\n"
                                          "  - affine: {match: '^fc\\.bias$', add: 1.0}\n")
    assert load_weights(model, state, mappings=[tmp_path / "scaled.yaml"]).warnings == []  # no add to the norm
    plain = archspec.build_text(OFFSET_NORM.replace("kind: rms, offset: 1.0", "kind: rms"), seed=0)
    assert load_weights(plain, state, mappings=[tmp_path / "gemma.yaml"]).warnings == []  # the recipe without offset


def test_a_missing_lm_head_with_the_embedding_tables_shape_is_hinted_tie():
    """The SmolLM3 trial's head left untied (its mapping drops the tied lm_head.weight): the
    error said '1 missing (head.fc.weight)' and no more."""
    untied = archspec.build_text("""
name: lm
params: {vocab: 50, dim: 16}
dims: {L: [1, 8]}
inputs: {ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: none}}
  - {id: head, head: {kind: lm, vocab: "${vocab}", bias: false}}
""")
    state = {k: v for k, v in untied.state_dict().items() if k != "head.fc.weight"}
    with pytest.raises(archspec.SpecError) as caught:
        best_fit(state, untied.state_dict(), [ARCHSPEC])
    hint = caught.value.diagnostics[0].hint
    assert ("head.fc.weight is missing and has the shape of embed.tokens.weight: if the reference ties them "
            "(tie_word_embeddings), say `tie: embed` on the head 'head'") in hint, hint


def test_a_fuse_lacking_a_part_in_a_load_that_fits_is_no_warning(tmp_path):
    """The DINOv3 trial's mapping fuses gate_proj and up_proj for the gated variant; loading the
    plain one warned for every layer, naming a key (fc1) that was nowhere."""
    naming = mapping(tmp_path, r"""
        name: optional_fuse
        rules:
          - fuse: {match: '^mlp\.{part}\.weight$', parts: [gate_proj, up_proj], into: fc1}
          - rename: {'^mlp\.up_proj\.': 'mlp.fc1.'}
        """)
    ours = {"mlp.fc1.weight": torch.zeros(4, 2)}
    fit = best_fit({"mlp.up_proj.weight": torch.zeros(4, 2)}, ours, [naming])
    assert fit.warnings == []
    assert fit.refused == ["the fuse rule (map.yaml:3:5) left mlp.up_proj.weight as it was: no gate_proj beside "
                           "up_proj".replace("map.yaml", f"{tmp_path}/map.yaml")]


def test_a_checkpoint_with_every_name_and_wrong_shapes_says_both_in_its_headline():
    """"83 of 83 (100%) of the checkpoint's tensors have the model's names" read as if nothing were
    wrong (the CAFormer trial); the headline now counts those of another shape."""
    state = small_vit().state_dict()
    state = {key: (value[:-1] if key.endswith("blocks.0.mlp.fc1.weight") else value) for key, value in state.items()}
    with pytest.raises(archspec.SpecError) as caught:
        archspec.build(VIT, SMALL, weights=state)
    message = caught.value.diagnostics[-1].message
    assert f"{len(state)} of {len(state)} (100%) of the checkpoint's tensors have the model's names, 1 of them in " \
           "another shape" in message
