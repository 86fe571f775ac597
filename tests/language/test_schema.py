"""The spec schema: the JSON Schema `archspec schema` prints for editors, and the declared
models' validation (archspec/core/declared.py) whose errors become plain, located diagnostics."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from archspec.cli import main
from archspec.language.compose import compose
from archspec.core.errors import Loc, SpecError
from archspec.language.loader import load_file, load_text
from archspec.language.expand import expand, validate
from archspec.pipeline import attempt_text

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("*.yaml")) + sorted((ROOT / "specs" / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def schema() -> dict:
    proc = subprocess.run([sys.executable, "-m", "archspec", "schema"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def validator(schema):
    return jsonschema.Draft202012Validator(schema)


def compose_path(path, overrides=None):
    return compose(load_file(path), overrides)


def test_schema_is_a_valid_draft_2020_12_schema(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_command_in_process(capsys, schema):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == schema


def test_schema_knows_every_primitive(schema):
    node = schema["$defs"]["Node"]["properties"]
    for op in ("patchify", "embed", "attention", "mlp", "merge", "head", "norm", "graph", "id", "from", "repeat",
               "as", "if"):
        assert op in node, op


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_schema_accepts_every_shipped_spec(path, validator):
    errors = [e.message for e in validator.iter_errors(load_file(str(path)).data)]
    assert errors == []


def data(name: str = "vit_b16") -> dict:
    return copy.deepcopy(load_file(str(ROOT / "specs" / f"{name}.yaml")).data)


def node(doc: dict, node_id: str) -> dict:
    def walk(nodes):
        for n in nodes:
            if n.get("id") == node_id:
                return n
            found = walk(n.get("graph", []))
            if found:
                return found
    return walk(doc["graph"])


def test_schema_rejects_an_unknown_primitive_key(validator):
    doc = data()
    node(doc, "attn")["attention"]["heds"] = 12
    assert not validator.is_valid(doc)
    doc = data()
    node(doc, "patch_embed")["patchify"]["ptch"] = 16
    assert not validator.is_valid(doc)


def test_schema_rejects_an_unknown_kind_and_top_level_key(validator):
    doc = data()
    node(doc, "head")["head"]["kind"] = "classifier"
    assert not validator.is_valid(doc)
    doc = data()
    doc["parms"] = {}
    assert not validator.is_valid(doc)


def test_schema_accepts_expressions_in_parameters(validator):
    doc = data()
    node(doc, "attn")["attention"]["qkv_bias"] = "${depth > 2}"
    assert validator.is_valid(doc)
    node(doc, "attn")["attention"]["qkv_bias"] = "yes"  # a string that is not an expression
    assert not validator.is_valid(doc)


def test_schema_accepts_expressions_as_list_entries(validator):
    doc = data()
    doc["graph"].append({"id": "pos", "param": {"shape": ["${depth * 2}", 192]}})
    assert validator.is_valid(doc), [e.message for e in validator.iter_errors(doc)][:3]
    doc["graph"][-1]["param"]["shape"] = ["two", 192]  # a string that is not an expression
    assert not validator.is_valid(doc)


def test_schema_requires_name_inputs_graph_unless_extending(validator):
    assert not validator.is_valid({"name": "x"})
    assert validator.is_valid({"extends": "base.yaml", "params": {"depth": 3}})


def test_the_checker_and_the_schema_agree_on_every_shipped_spec():
    for path in SPECS:
        validate(compose_path(str(path)))  # raises SpecError if the checker disagrees


# -- validation errors as diagnostics ----------------------------------------------------------


def diags(text: str):
    with pytest.raises(SpecError) as info:
        expand(load_text(text, "s.yaml"))
    return info.value.diagnostics


OK_INPUTS = "inputs:\n  x: [B, 4, 8]\n"


def test_unknown_key_with_did_you_mean():
    (d,) = diags("name: s\nparms: {}\n" + OK_INPUTS + "graph: [{norm: {}}]\n")
    assert (d.message, d.hint, d.loc) == ("unknown key 'parms' in the spec", "did you mean 'params'?",
                                          Loc("s.yaml", 2, 1))


def test_missing_keys_point_at_the_mapping_that_lacks_them():
    got = [(d.message, d.loc) for d in diags("name: s\n")]
    assert got == [("missing required `inputs` in the spec", Loc("s.yaml", 1, 1)),
                   ("missing required `graph` in the spec", Loc("s.yaml", 1, 1))]
    (d,) = diags("name: s\ninputs:\n  x: {dtype: int64}\ngraph: [{norm: {}}]\n")
    assert (d.message, d.loc) == ("missing required `inputs.x.shape` in the spec", Loc("s.yaml", 3, 3))


def test_a_misspelt_required_key_is_reported_once():
    got = diags("name: s\n" + OK_INPUTS + "graph:\n  - attention: {kind: global, hedas: 2}\n")
    assert [(d.message, d.hint) for d in got] == [("unknown key 'hedas' in attention (kind global)",
                                                   "did you mean 'heads'?")]


def test_a_missing_required_parameter():
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - id: a\n    attention: {kind: global}\n")
    assert (d.message, d.path, d.loc) == ("missing required `heads` in attention (kind global)", "a",
                                          Loc("s.yaml", 6, 5))


def test_unknown_kind():
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - attention: {kind: windw, heads: 2}\n")
    assert (d.message, d.hint, d.loc) == ("unknown kind 'windw' of attention", "did you mean 'window'?",
                                          Loc("s.yaml", 5, 23))


def test_a_key_of_another_kind():
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - attention: {kind: global, heads: 2, window: 7}\n")
    assert d.hint.startswith("'window' is a parameter of kinds shifted, sliding, window; sliding is causal")


def test_one_error_for_a_union_not_one_per_member():
    (d,) = diags("name: s\n" + OK_INPUTS + "graph: [{norm: {}}]\noutputs: {a: norm, b: 5}\n")
    assert (d.message, d.loc) == ("`outputs.b` must be a string; got 5", Loc("s.yaml", 5, 23))
    (d,) = diags("name: s\n" + OK_INPUTS + "graph: [{norm: {}}]\noutputs: 7\n")
    assert d.message == "`outputs` must be a list or a mapping; got 7"


def test_empty_collections():
    got = [d.message for d in diags("name: s\ninputs: {}\ngraph: []\n")]
    assert got == ["`inputs` must not be empty", "`graph` must not be empty"]


@pytest.mark.parametrize("text, message, loc", [
    ("name: 2d\n", "`name` must be a name (letters, digits and _, not starting with a digit); got '2d'",
     Loc("s.yaml", 1, 7)),
    ("name: s\nparams: {my-width: 3}\n", "'my-width' is not a valid name in `params`", Loc("s.yaml", 2, 10)),
    ("name: s\nblocks: {1st: {graph: [{norm: {}}]}}\n", "'1st' is not a valid name in `blocks`", Loc("s.yaml", 2, 10)),
])
def test_names_must_be_identifiers(text, message, loc):
    got = [d for d in diags(text + OK_INPUTS + "graph: [{norm: {}}]\n") if d.message == message]
    assert [d.loc for d in got] == [loc]


def test_node_keys_that_take_expressions_say_so():
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - repeat: 2.5\n    norm: {}\n")
    assert d.message == "`repeat` must be a whole number or an expression ${...}; got 2.5"
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - if: [1]\n    norm: {}\n")
    assert d.message == "`if` must be true, false or an expression ${...}; got a list"


def test_number_hints():
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - attention: {kind: global, heads: '2'}\n")
    assert (d.message, d.hint) == ("`heads` must be an integer; got '2'",
                                   "write numbers without quotes; expressions go in ${...}")
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - attention: {kind: global, heads: two}\n")
    assert d.hint is None  # unquoted text: nothing to unquote
    (d,) = diags("name: s\n" + OK_INPUTS + "graph:\n  - attention: {kind: global, heads: 2, qkv_bias: no}\n")
    assert d.hint == "write true or false; 'no' is a string in YAML 1.2"


# -- as strict as a static schema can be (issue 13) --------------------------------------------
def swin_with(change) -> dict:
    doc = data("swin_t")
    change(doc["blocks"]["swin_block"]["graph"])
    return doc


def rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


def test_a_kind_given_as_an_expression_still_allows_only_the_kinds_keys(validator):
    assert validator.is_valid(swin_with(lambda g: None))
    doc = swin_with(lambda g: rename(g[0]["attention"], "window", "windw"))
    assert "${'shifted' if shifted else 'window'}" in str(doc)
    errors = list(validator.iter_errors(doc))
    assert errors and any("windw" in e.message or "windw" in str(e.instance) for e in errors)
    doc = swin_with(lambda g: g[0]["attention"].update(shift="${window // 2}"))  # a key of the shifted kind
    assert validator.is_valid(doc)


def test_an_op_one_typo_away_from_a_primitive_is_refused(validator):
    doc = swin_with(lambda g: rename(g[1], "mlp", "mpl"))
    assert not validator.is_valid(doc)
    for typo in ("attnetion", "atention", "nrom", "patchfy", "grpah"):
        doc = data()
        rename(node(doc, "attn"), "attention", typo)
        assert not validator.is_valid(doc), typo
    doc = data()
    doc["blocks"] = {"ffn": {"graph": [{"mlp": {"ratio": 4.0}}]}}
    doc["graph"].insert(1, {"ffn": {}})  # short block names stay free
    assert validator.is_valid(doc)


def test_a_schema_for_one_spec_knows_its_blocks(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "archspec", "schema", "specs/swin_s.yaml"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    own = jsonschema.Draft202012Validator(json.loads(proc.stdout))
    assert own.is_valid(data("swin_t"))
    doc = data("swin_t")
    doc["graph"][1]["graph"][1]["swin_blok"] = doc["graph"][1]["graph"][1].pop("swin_block")
    assert not own.is_valid(doc)  # no typo rule needed: the spec has no block of that name
    doc = data("swin_t")
    doc["graph"][1]["graph"][1]["swin_block"]["heds"] = 3
    assert not own.is_valid(doc)  # nor a parameter of that name
    assert subprocess.run([sys.executable, "-m", "archspec", "schema", "nope.yaml"], capture_output=True,
                          cwd=ROOT, timeout=60).returncode == 2


# -- expressions in the editor (issue 20, item 7) -----------------------------------------------
def _every_error(errors):
    """Each error and each error inside it (the alternatives of an anyOf or a oneOf)."""
    for error in errors:
        yield error
        yield from _every_error(error.context or [])


def _refusals_of_the_kind(validator, doc: dict) -> list:
    return [e for e in _every_error(validator.iter_errors(doc))
            if e.validator in ("const", "enum") and isinstance(e.instance, str) and e.instance.startswith("${")]


def kind_expression_spec(params: str) -> dict:
    text = ("name: k\nparams: {k: window}\ninputs:\n  x: {shape: [B, 64, 16], grid: [8, 8]}\n"
            f"graph:\n  - attention: {params}\n")
    return load_text(text, "k.yaml").data


def test_a_kind_expression_is_never_refused_as_a_kind(validator):
    """yaml-language-server shows the errors of the alternative closest to the node: a node whose
    kind is an expression and has a wrong key got 'Value must be "alibi" | ... | "window"' on its
    `kind:` beside the real error. No alternative refuses the expression now."""
    assert validator.is_valid(kind_expression_spec('{kind: "${k}", heads: 2, window: 4}'))
    wrong_key = kind_expression_spec('{kind: "${k}", heads: 2, windw: 4}')
    assert not validator.is_valid(wrong_key)
    assert _refusals_of_the_kind(validator, wrong_key) == []
    assert any("windw" in e.message for e in _every_error(validator.iter_errors(wrong_key)))
    wrong_kind = kind_expression_spec("{kind: windw, heads: 2}")
    assert not validator.is_valid(wrong_kind)
    assert any(e.instance == "windw" for e in _every_error(validator.iter_errors(wrong_kind)))


def test_a_kind_expression_allows_the_keys_of_one_kind_not_of_several(validator):
    """Whichever kind the expression gives, the checker refuses the keys of the other kinds: a
    window's `window` beside an sra's `sr_ratio` is wrong for every kind."""
    assert validator.is_valid(kind_expression_spec('{kind: "${k}", heads: 2, sr_ratio: 2}'))
    assert not validator.is_valid(kind_expression_spec('{kind: "${k}", heads: 2, window: 4, sr_ratio: 2}'))
    for kind in ("window", "sra"):
        attempt = attempt_text("archspec: 1\nname: k\nparams: {k: " + kind + "}\ninputs:\n  x: {shape: [B, 64, 16], "
                               "grid: [8, 8]}\ngraph:\n  - attention: {kind: \"${k}\", heads: 2, window: 4, "
                               "sr_ratio: 2}\n")
        assert attempt.error is not None and "unknown key" in attempt.error.message


def _yaml_language_server() -> bool:
    """Whether node and yaml-language-server are here (NODE_PATH names where it is installed)."""
    if shutil.which("node") is None:
        return False
    found = subprocess.run(["node", "-e", "require.resolve('yaml-language-server'); "
                            "require.resolve('vscode-languageserver-textdocument')"],
                           capture_output=True, timeout=30)
    return found.returncode == 0


@pytest.mark.skipif(not _yaml_language_server(), reason="needs node and yaml-language-server (NODE_PATH)")
def test_yaml_language_server_underlines_the_wrong_key_and_not_the_kind_expression(tmp_path, schema):
    schema_file = tmp_path / "archspec.schema.json"
    schema_file.write_text(json.dumps(schema))
    spec = tmp_path / "kind.yaml"
    spec.write_text("name: k\nparams: {k: window}\ninputs:\n  x: {shape: [B, 64, 16], grid: [8, 8]}\ngraph:\n"
                    "  - attention: {kind: \"${k}\", heads: 2, windw: 4}\n  - attention: {kind: windw, heads: 2}\n")
    shown = subprocess.run(["node", str(ROOT / "tests" / "editor" / "yls_validate.js"), str(schema_file), str(spec),
                            *map(str, SPECS)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    kind_file = shown.stdout.split(f"{spec}: ")[1].split("\n" + str(SPECS[0]))[0]
    assert kind_file.startswith("2 problem(s)")
    assert "6:41 Property windw is not allowed." in kind_file and "7:23 Value must be" in kind_file
    assert [line for line in shown.stdout.splitlines() if line.endswith("problem(s)") and not line.startswith(
        str(spec))] == [f"{path}: 0 problem(s)" for path in SPECS]


def test_a_list_of_the_wrong_length_says_how_many_items_it_takes():
    """EoMT's trial: `pad: {sides: [0, 1, 2]}` was told "`sides` must not be empty", and five
    sides got pydantic's raw "list should have at most 4 items after validation"."""
    for sides, got in (("[0, 1, 2]", 3), ("[0, 1, 2, 3, 4]", 5)):
        (d,) = diags(f"name: s\ninputs: {{x: [B, 3, 8, 8]}}\ngraph:\n  - {{pad: {{sides: {sides}}}}}\n")
        assert (d.message, d.loc) == (f"`sides` takes 4 items, got {got}", Loc("s.yaml", 4, 19))
    (d,) = diags("name: s\n" + OK_INPUTS + "graph: []\n")
    assert d.message == "`graph` must not be empty"
    (d,) = diags("name: s\ninputs: {x: [B, 3, 8, 8]}\ngraph:\n  - {pool: {fn: mean, kernel: [2, 2, 2]}}\n")
    assert d.message == "`kernel` takes at most 2 items, got 3"  # the UperNet trial read "takes None items"
