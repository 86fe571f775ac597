"""`archspec primitives`: every primitive, kind and option, from the registry the checker uses."""

from __future__ import annotations

import json

from archspec.cli import main
from archspec.primitives import registry


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_lists_every_primitive_kind_and_option(capsys):
    code, out, _ = run(capsys, "primitives", "--json")
    listing = {p["primitive"]: p for p in json.loads(out)}
    assert code == 0 and set(listing) == set(registry.primitives())
    for name, p in listing.items():
        kinds = [k["kind"] for k in p["kinds"]]
        assert kinds == (registry.kinds(name) if registry.has_kinds(name) else [None])
        for kind in p["kinds"]:
            fields = registry.op(name, kind["kind"]).Params.model_fields
            assert [o["name"] for o in kind["options"]] == [f.alias or n for n, f in fields.items() if n != "kind"]
    window = next(k for k in listing["attention"]["kinds"] if k["kind"] == "window")
    options = {o["name"]: o for o in window["options"]}
    assert options["window"]["required"] and options["window"]["type"] == "int > 0"
    assert options["bias"] == {"name": "bias", "type": "table | cpb | none", "required": False, "default": "table",
                               "doc": "relative position bias: table (Swin v1), cpb (Swin v2 log-spaced MLP) or none"}
    assert listing["norm"]["default_kind"] == "layer"


def test_text_for_one_primitive(capsys):
    code, out, _ = run(capsys, "primitives", "mlp")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("mlp: The feed-forward sub-layer")
    assert any(line.split()[:3] == ["ratio", "number", ">"] for line in lines)
    assert any(line.split()[:3] == ["dwconv", "bool", "false"] for line in lines)


def test_an_unknown_primitive_is_a_usage_error(capsys):
    code, _, err = run(capsys, "primitives", "atention")
    assert code == 2 and "did you mean 'attention'" in err


def test_attention_lists_its_score_parts(capsys):
    from archspec.primitives.ops.attention.scores.base import known_parts

    code, out, _ = run(capsys, "primitives", "attention")
    assert code == 0
    for name in known_parts():
        assert f"score part: {name}:" in out
    code, out, _ = run(capsys, "primitives", "attention", "--json")
    parts = {p["part"]: p for p in json.loads(out)[0]["score_parts"]}
    assert set(parts) == set(known_parts()) and parts["talking_heads"]["fused"] is False
