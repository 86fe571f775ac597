"""archspec/core/declared.py against pydantic: the same declaration, fed the same hand-picked and
random inputs, gives the same errors (type, loc, msg, input, ctx) and the same values, on every
op's, score part's and spec document's model. And `archspec check` imports no pydantic."""

from __future__ import annotations

import random
import subprocess
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import pytest
from pydantic import ValidationError as PydanticError

from archspec.core.declared import Field, Model, ValidationError, field_validator, pydantic_model
from archspec.language import schema
from archspec.primitives import registry
from archspec.primitives.ops.attention.scores.base import known_parts

ROOT = Path(__file__).resolve().parents[2]


def _models() -> list[type[Model]]:
    found = {op.Params for op in registry.ops()} | {part.Params for part in known_parts().values()}
    found |= {schema.SpecDoc, schema.NodeMeta, schema.BlockDef, schema.ParamType, schema.InputDecl}
    return sorted(found, key=lambda m: (m.__module__, m.__qualname__))


def _plain(errors: list[dict]) -> list[dict]:
    """Errors comparable across the two: a validator's exception by its text."""
    out = []
    for err in errors:
        err = dict(err)
        err.pop("url", None)
        if "error" in err.get("ctx", {}):
            err["ctx"] = {**err["ctx"], "error": str(err["ctx"]["error"])}
        out.append(err)
    return out


def _compare(model: type[Model], data: Any) -> None:
    theirs = pydantic_model(model)
    try:
        expected = theirs.model_validate(data)
    except PydanticError as exc:
        with pytest.raises(ValidationError) as ours:
            model.model_validate(data)
        assert repr(_plain(ours.value.errors(include_url=False))) == repr(_plain(exc.errors(include_url=False))), \
            (model.__name__, data)
        return
    got = model.model_validate(data)
    assert repr(got.model_dump()) == repr(expected.model_dump()), (model.__name__, data)  # 1 is not 1.0; nan is nan
    assert got.model_fields_set == expected.model_fields_set


POOL = [None, True, False, 0, 1, 2, 3, -1, 7, 1 << 25, 0.0, 0.5, 1.0, 1.5, -0.5, 1e-6, float("inf"), float("nan"),
        "", "x", "pre", "window", "table", "${a}", "not a name!", [], [1], [2, 2], [1, 0], [1, 2, 3], ["a", "b"],
        [1.5, 2], {}, {"a": 1}, {"x": [1, 2]}, (1, 2), "b h i d, b h j d -> b h i j", "b c h w -> b (h w) c"]


def _candidates(annotation: Any, default: Any) -> list[Any]:
    """Values worth trying for one field: the pool, its default, its literal members."""
    values = list(POOL) + ([default] if default is not None else [])
    for arg in typing.get_args(annotation):
        values += _candidates(arg, None)
    if typing.get_origin(annotation) is Literal:
        values += list(typing.get_args(annotation))
    return values


def _inputs(model: type[Model], rng: random.Random, count: int) -> list[dict]:
    fields = model.model_fields
    out = [{}]
    for name, field in fields.items():  # one field at a time
        key = field.alias or name
        for value in _candidates(field.annotation, field.get_default(call_default_factory=True)):
            out.append({key: value})
    for _ in range(count):  # several at once, sometimes with an unknown key or a required one left out
        keys = rng.sample(list(fields), k=min(len(fields), rng.randint(1, 4)))
        data = {fields[k].alias or k: rng.choice(_candidates(fields[k].annotation, None)) for k in keys}
        if rng.random() < 0.3:
            data["windw"] = rng.choice(POOL)
        out.append(data)
    return out


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__qualname__)
def test_errors_and_values_match_pydantic(model):
    rng = random.Random(model.__qualname__)
    for data in _inputs(model, rng, 40):
        _compare(model, data)


# -- hand-built declarations: each form the models use, and what none of them uses yet ------------------


class Inner(Model):
    a: int = 1


class Every(Model):
    """Every annotation declared.py understands."""

    i: Annotated[int, Field(gt=0, le=1 << 24)] = 1
    f: float = Field(0.5, ge=0.0, lt=1.0, allow_inf_nan=False)
    g: float = Field(0.5, gt=1e-5, le=2.5)
    s: str = Field("x", pattern=r"^[a-z]+$", max_length=5)
    t: Annotated[str, Field(min_length=1, max_length=1)] = "x"
    lit: Literal["a", "b", "c"] = "a"
    one: Literal[1, 2] = 1
    pair: Union[Annotated[int, Field(gt=0)],
                Annotated[list[Annotated[int, Field(gt=0)]], Field(min_length=2, max_length=2)]] = 1
    opt: Optional[float] = Field(None, gt=0)
    inner: Inner = Field(default_factory=Inner)
    names: dict[Annotated[str, Field(pattern="^a")], int] = Field(default_factory=dict)
    pad: Union[bool, Literal["x"]] = False
    num: int | float = 0
    nested: list[Inner] = Field(default_factory=list)
    either: Union[Inner, list[int], None] = None
    anything: Any = None
    from_: Union[str, list[str], None] = Field(None, alias="from")

    @field_validator("s")
    @classmethod
    def _no_q(cls, value):
        if "q" in value:
            raise ValueError("has a q")
        return value


HAND_PICKED = [
    {"i": True}, {"i": 2.0}, {"i": 0}, {"i": "3"}, {"i": 1 << 30}, {"f": 3}, {"f": float("inf")}, {"f": True},
    {"f": float("nan")}, {"g": 0}, {"g": 3}, {"g": float("nan")}, {"s": 3}, {"s": "ABC"}, {"s": "abcdefg"},
    {"s": "aqa"}, {"t": ""}, {"t": "ab"}, {"lit": "d"}, {"lit": 1}, {"lit": None}, {"one": 3}, {"one": True},
    {"one": 1.0}, {"pair": 0}, {"pair": [1]}, {"pair": [1, 0, 2]}, {"pair": [0, 1]}, {"pair": "x"}, {"pair": [1, 2]},
    {"opt": "x"}, {"opt": 0}, {"opt": 2}, {"inner": 3}, {"inner": {"b": 1}}, {"inner": {"a": True}},
    {"names": {}}, {"names": {"b": 1}}, {"names": {"a": "x"}}, {"names": [1]}, {"pad": "y"}, {"pad": "x"},
    {"num": 1}, {"num": 1.5}, {"num": "1"}, {"nested": [1, {"a": "x"}]}, {"nested": (1,)}, {"either": 3},
    {"either": {"a": True}}, {"either": [1, "x"]}, {"zz": 1}, {"from": 3}, {"from_": ["a"]}, {"from": ["a", 1]},
    {"i": 0, "f": 2, "s": 1, "extra": None},
]


@pytest.mark.parametrize("data", HAND_PICKED, ids=repr)
def test_hand_picked_inputs_match_pydantic(data):
    _compare(Every, data)


class Required(Model):
    model_config = {"populate_by_name": True}
    name: str = Field(pattern="^[a-z]+$")
    size: list[int] = Field(min_length=1)
    from_: str = Field(alias="from")


@pytest.mark.parametrize("data", [{}, {"name": "a"}, {"nme": "a", "size": []}, {"name": "a", "size": [1], "from_": "x"},
                                  {"name": "a", "size": [1], "from": "x"}, 5, [1]], ids=repr)
def test_required_and_aliases_match_pydantic(data):
    _compare(Required, data)


def test_a_frozen_record_with_pydantic_s_api():
    p = Every.model_validate({"i": 3, "from": "x"})
    assert p.i == 3 and p.from_ == "x" and p.model_fields_set == {"i", "from_"}
    assert p == Every(i=3, **{"from": "x"}) and p != Every(i=2, **{"from": "x"})
    q = p.model_copy(update={"i": 4})
    assert (q.i, p.i, q.model_fields_set) == (4, 3, {"i", "from_"})
    assert Inner(a=1) == Inner() and hash(Inner(a=1)) == hash(Inner()) and Inner(a=2) != Inner()
    with pytest.raises(ValidationError):
        p.i = 5
    assert p.model_dump()["inner"] == {"a": 1} and p.model_dump(by_alias=True)["from"] == "x"
    assert Every.model_fields["i"].annotation is int and Every.model_fields["from_"].alias == "from"
    assert Required.model_fields["name"].is_required() and not Every.model_fields["i"].is_required()
    assert repr(Inner()) == "Inner(a=1)"
    assert Every.model_validate({"inner": Inner(a=2)}).inner == Inner(a=2)  # an instance is taken as it is


def test_an_unsupported_annotation_fails_loudly():
    class Odd(Model):
        when: complex = 1j

    with pytest.raises(TypeError, match="unsupported annotation"):
        Odd.model_validate({})


# -- check imports no pydantic ---------------------------------------------------------------------


def test_check_imports_no_pydantic():
    probe = ("import sys, archspec; archspec.check('specs/swin_t.yaml'); "
             "assert 'pydantic' not in sys.modules, 'pydantic imported'")
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True)


def test_the_check_command_imports_no_pydantic():
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "archspec", "check", "specs/swin_t.yaml"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "archspec.language.expand" in imported  # the probe sees the imports
    assert not [name for name in imported if name.split(".")[0] == "pydantic"]
