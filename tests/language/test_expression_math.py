"""Math in `${...}` (issue 35): log, exp, sqrt, ceil, floor, round, sign, abs, min, max and where,
computed by our evaluator (never eval); a domain error or an overflow is a located error."""

from __future__ import annotations

import math

import pytest

import archspec
from archspec.language.expressions import ExprError, evaluate, interpolate

NAMES = {"x": 0, "L": 128, "d": 64, "buckets": 32}


def ev(text):
    return evaluate(text, NAMES.__getitem__, lambda: list(NAMES))


def err(text) -> ExprError:
    with pytest.raises(ExprError) as info:
        ev(text)
    return info.value


@pytest.mark.parametrize("text, value", [
    ("log(10000.0)", math.log(10000.0)), ("log(1)", 0.0), ("log(8, 2)", 3.0), ("log(100, 10)", 2.0),
    ("exp(0)", 1.0), ("exp(1)", math.e), ("sqrt(16)", 4.0), ("sqrt(0)", 0.0), ("sqrt(d)", 8.0),
    ("ceil(2.1)", 3), ("ceil(-2.1)", -2), ("ceil(3)", 3), ("floor(2.9)", 2), ("floor(-2.1)", -3),
    ("round(2.6)", 3), ("round(-2.6)", -3), ("round(2.345, 2)", 2.35),
    ("sign(-3)", -1), ("sign(0)", 0), ("sign(7)", 1), ("sign(-0.5)", -1.0), ("sign(0.0)", 0.0),
    ("abs(-3)", 3), ("abs(-2.5)", 2.5), ("min(3, 1, 2)", 1), ("max([4, 9])", 9),
    ("where(L > 64, 1, 2)", 1), ("where(L < 64, 1, 2)", 2), ("where(x > 0, log(x), 0)", 0),
    ("where(x == 0, 5, sqrt(-1))", 5), ("where(0, 1, 2)", 2),
    # DeBERTa's log buckets, as written in HF: ceil(log(rel / mid) / log((max - 1) / mid) * (mid - 1)) + mid
    ("ceil(log(100 / 128) / log((512 - 1) / 128) * (128 - 1)) + 128", 106),
    ("int(floor(log(L) / log(2)))", 7), ("2 ** ceil(log(L, 2))", 128),
])
def test_values(text, value):
    result = ev(text)
    assert result == pytest.approx(value) and type(result) is type(value)


@pytest.mark.parametrize("text, message, offset", [
    ("log(0)", "log(): log of 0 is undefined (it needs a number above 0)", 0),
    ("1 + log(x)", "log(): log of 0 is undefined (it needs a number above 0)", 4),
    ("log(-2.5)", "log(): log of -2.5 is undefined (it needs a number above 0)", 0),
    ("log(8, 1)", "log(): log to base 1 is undefined (the base must be above 0 and not 1)", 0),
    ("log(8, -2)", "log(): log to base -2 is undefined (the base must be above 0 and not 1)", 0),
    ("sqrt(-1)", "sqrt(): sqrt of -1 is undefined (it needs a number 0 or above)", 0),
    ("d + sqrt(x - 1)", "sqrt(): sqrt of -1 is undefined (it needs a number 0 or above)", 4),
    ("exp(1000)", "exp(): exp(1000) is too large", 0),
    ("exp(709) * 10", "number too large (infinite)", 0),
    ("ceil(1e300)", "integer too large", 0),
    ("floor(-1e300)", "integer too large", 0),
    ("log('a')", "log(): log() takes a number, got string 'a'", 0),
    ("sqrt([4])", "sqrt(): sqrt() takes a number, got list [4]", 0),
    ("ceil(True)", "ceil(): ceil() takes a number, got boolean True", 0),
    ("where(1, 2)", "where() takes 3 arguments (cond, a, b), got 2", 0),
    ("where([1], 2, 3)", "where()'s condition must be one value, got a list", 6),
    ("where(1, log(0), 3)", "log(): log of 0 is undefined (it needs a number above 0)", 9),
    ("logg(2)", "unknown function 'logg'", 0),
])
def test_errors(text, message, offset):
    e = err(text)
    assert (e.message, e.offset) == (message, offset)


def test_errors_are_located_inside_a_value():
    with pytest.raises(ExprError) as info:
        interpolate("theta ${log(x)}", NAMES.__getitem__)
    assert info.value.offset == len("theta ${")


def test_the_functions_are_listed_in_the_hint():
    hint = err("zzzzzz(1)").hint
    assert "log" in hint and "where" in hint and "sqrt" in hint


def test_no_eval_path(monkeypatch):
    """The math goes through our evaluator: eval and exec are never called."""
    import builtins

    def refuse(*a, **k):
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    assert ev("where(L > 1, ceil(log(L, 2)), 0)") == 7


SPEC = """\
archspec: 1
name: math_in_a_spec
params:
  dim: 64
  theta: ${{log(10000.0)}}
  hidden: ${{int(ceil(dim * 8 / 3 / 16) * 16)}}
  scale: {scale}
inputs:
  x: [B, 8, 64]
graph:
  - {{id: y, linear: {{dim: "${{hidden}}"}}}}
outputs: [y]
"""


def test_math_in_a_spec(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SPEC.format(scale="${sqrt(dim)}"))
    report = archspec.check(str(path))
    assert report.params == 64 * 176 + 176  # hidden = ceil(64 * 8 / 3 / 16) * 16 = 176


def test_a_domain_error_in_a_spec_points_at_its_line_and_column(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SPEC.format(scale="${sqrt(dim - 65)}"))
    with pytest.raises(archspec.SpecError) as info:
        archspec.check(str(path))
    d = info.value.diagnostics[0]
    assert "sqrt of -1 is undefined" in d.message
    assert (d.loc.line, d.loc.col) == (7, 12), d.loc
