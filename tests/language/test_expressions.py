"""archspec.expressions: the `${...}` evaluator over a whitelisted AST."""

from __future__ import annotations

import pytest

from archspec.language.expressions import MAX_INT, MAX_LIST, MAX_TEXT, ExprError, evaluate, has_expression, interpolate

NAMES = {"dim": 96, "depths": [2, 2, 6, 2], "heads": [3, 6, 12, 24], "s": 2, "b": 1, "ratio": 4.0,
         "shifted": True, "kind": "window", "grid": [[1, 2], [3, 4]]}


def lookup(name):
    return NAMES[name]


def ev(text):
    return evaluate(text, lookup, lambda: list(NAMES))


def err(text) -> ExprError:
    with pytest.raises(ExprError) as info:
        ev(text)
    return info.value


# -- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("7 // 2", 3), ("7 / 2", 3.5), ("7 % 3", 1), ("2 ** 10", 1024),
    ("-dim", -96), ("+dim", 96), ("dim * ratio", 384.0), ("int(dim * ratio)", 384),
    ("1 < 2 < 3", True), ("3 > 2 > 2", False), ("dim == 96 and not shifted", False), ("0 or 5", 5),
    ("'a' if shifted else 'b'", "a"), ("'shifted' if b % 2 == 1 else 'window'", "shifted"),
    ("depths[s]", 6), ("depths[-1]", 2), ("depths[:s]", [2, 2]), ("depths[::2]", [2, 6]), ("grid[1][0]", 3),
    ("sum(depths)", 12), ("sum(depths[:s]) + b", 5), ("len(depths)", 4), ("min(depths)", 2), ("max(3, 9)", 9),
    ("abs(-3)", 3), ("round(2.6)", 3), ("round(2.345, 2)", 2.35), ("float(3)", 3.0), ("range(3)", [0, 1, 2]),
    ("linspace(0, 1, 5)", [0.0, 0.25, 0.5, 0.75, 1.0]), ("linspace(0, 0.1, 1)", [0.0]), ("linspace(0, 1, 0)", []),
    ("[dim, dim * 2]", [96, 192]), ("(1, 2)", [1, 2]), ("kind == 'window'", True), ("6 in depths", True),
    ("5 not in depths", True), ("'ab' * 2", "abab"), ("[0] * 3", [0, 0, 0]), ("depths + [1]", [2, 2, 6, 2, 1]),
    ("None", None), ("True", True), ("sum([])", 0), ("  dim  ", 96),
])
def test_values(text, value):
    result = ev(text)
    assert result == value and type(result) is type(value)


# -- errors and their columns -------------------------------------------------------------------


def test_unknown_name_suggests_the_closest():
    e = err("dmi * 2")
    assert (e.message, e.offset, e.hint) == ("unknown name 'dmi'", 0, "did you mean 'dim'?")


def test_unknown_name_lists_the_names_in_scope():
    e = err("1 + zzz")
    assert e.message == "unknown name 'zzz'" and e.offset == 4
    assert e.hint.startswith("names here: dim, depths, heads")


def test_a_function_used_as_a_name():
    assert err("len").hint == "len is a function: call it, e.g. len(...)"


def test_division_by_zero_names_what_was_zero():
    assert err("dim // (s - 2)").hint == "`s - 2` is 0 here"
    assert err("dim // (b - 1)").hint == "`b - 1` is 0 here"
    assert err("0 ** -1").hint == "0 to a negative power" and err("dim // 0").hint is None


@pytest.mark.parametrize("text, message, offset", [
    ("dim // 0", "division by zero", 0),
    ("1 + dim % 0", "division by zero", 4),
    ("dim / 0.0", "division by zero", 0),
    ("0 ** -1", "division by zero", 0),
    ("depths[4]", "index 4 is out of range for a list of 4", 0),
    ("depths[-5]", "index -5 is out of range for a list of 4", 0),
    ("depths[1.0]", "index must be an integer, got number 1.0", 0),
    ("depths[True]", "index must be an integer, got boolean True", 0),
    ("depths[::0]", "slice step cannot be zero", 0),
    ("depths[:'a']", "slice bounds must be integers, got string", 0),
    ("dim[0]", "cannot index a integer", 0),
    ("1 + 'a'", "cannot apply + to integer and string", 0),
    ("None + 1", "cannot apply + to null and integer", 0),
    ("1 < 'a'", "cannot compare integer with string", 0),
    ("1 in 5", "`in` looks for a value in a list (or a text in a text), and its right side is integer 5", 0),
    ("-'a'", "unary minus needs a number, got string", 0),
    ("dim.real", "attribute access (.real) is not allowed in an expression", 0),
    ("(lambda: 1)()", "lambda is not allowed in an expression", 1),
    ("[x for x in depths]", "a comprehension is not allowed in an expression", 0),
    ("{1: 2}", "a mapping {...} is not allowed in an expression", 0),
    ("{1, 2}", "a set {...} is not allowed in an expression", 0),
    ("f'{dim}'", "an f-string is not allowed in an expression", 0),
    ("(y := 1)", "assignment (:=) is not allowed in an expression", 1),
    ("[*depths]", "* unpacking is not allowed in an expression", 1),
    ("dim is 96", "`is` is not allowed; compare with == or !=", 0),
    ("~dim", "the operator ~ is not allowed", 0),
    ("dim << 1", "this operator is not allowed", 0),
    ("dim @ dim", "this operator is not allowed", 0),
    ("__import__('os')", "unknown function '__import__'", 0),
    ("__import__('os').system('ls')", "attribute access (.system) is not allowed in an expression", 0),
    ("eval('1')", "unknown function 'eval'", 0),
    ("open('/etc/passwd')", "unknown function 'open'", 0),
    ("getattr(dim, 'real')", "unknown function 'getattr'", 0),
    ("depths[0](1)", "only the named functions can be called", 0),
    ("max(depths, key=len)", "keyword arguments are not allowed", 0),
    ("1j", "constant 1j is not allowed", 0),
    ("b'x'", "constant b'x' is not allowed", 0),
    ("...", "constant Ellipsis is not allowed", 0),
    ("len(5)", "len(): object of type 'int' has no len()", 0),
    ("min()", "min(): min() of nothing", 0),
    ("sum(['a'])", "sum(): sum() takes numbers, got string", 0),
    ("range(1.5)", "range(): range's arguments must be integers, got number 1.5", 0),
    ("linspace(0, 1, 2.5)", "linspace(): linspace's third argument must be integers, got number 2.5", 0),
    ("1 +", "invalid expression: invalid syntax", 3),
    ("", "empty expression", 0),
    ("   ", "empty expression", 0),
])
def test_errors(text, message, offset):
    e = err(text)
    assert (e.message, e.offset) == (message, offset)


def test_disallowed_syntax_has_a_hint():
    assert "the functions min, max" in err("dim.real").hint


# -- bounds: nothing huge is ever built -----------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("[0] * 10**9", f"result would have more than {MAX_LIST} items"),
    ("10**9 * [0]", f"result would have more than {MAX_LIST} items"),
    ("'a' * 10**9", f"result would have more than {MAX_LIST} items"),
    ("9 ** 9 ** 9", "exponent too large"),
    ("2 ** 10 ** 10", "exponent too large"),
    ("2 ** 64", "integer too large"),
    ("10 ** 18 * 10 ** 18", "integer too large"),
    ("range(10 ** 12)", f"range(): range of 1000000000000 numbers (at most {MAX_LIST})"),
    ("linspace(0, 1, 10 ** 9)", f"linspace(): linspace of 1000000000 points (allowed 0..{MAX_LIST})"),
    ("[[0] * 10000] * 10000", f"result has more than {MAX_LIST} items"),
    ("[[0] * 100] * 101", f"result has more than {MAX_LIST} items"),
    ("round(5, -10 ** 9)", "round(): -1000000000 digits (allowed -30..30)"),
    ("'%0999999999d' % 1", "% works on numbers; string formatting is not allowed"),
    ("(-8) ** 0.5", "result is not a real number"),
    ("1e308 * 10", "number too large (infinite)"),
    ("float('inf')", "number too large (infinite)"),
    ("float('nan')", "result is not a number (NaN)"),
    ("int(1e300)", "integer too large"),
    ("x" * (MAX_TEXT + 1), f"expression longer than {MAX_TEXT} characters"),
])
def test_huge_results_are_refused(text, message):
    assert err(text).message == message


def test_limits_are_inclusive():
    assert ev("2 ** 63") == MAX_INT
    assert len(ev(f"[0] * {MAX_LIST}")) == MAX_LIST
    assert len(ev("[[0] * 99] * 100")) == 100  # 100 lists + 9,900 numbers: every item counts


def test_deep_nesting_is_an_error_not_a_crash():
    e = err("(" * 300 + "1" + ")" * 300)
    assert e.message.startswith("invalid expression") or e.message == "expression too deeply nested"


def test_lookup_failures_other_than_unknown_names_propagate():
    class Boom(Exception):
        pass

    def lookup_boom(name):
        raise Boom(name)

    with pytest.raises(Boom):
        evaluate("x + 1", lookup_boom)


# -- interpolation inside a YAML value ----------------------------------------------------------------


def test_has_expression():
    assert has_expression("${a}") and has_expression("x ${a} y")
    assert not has_expression("a") and not has_expression(3) and not has_expression("$a")


def test_a_whole_expression_keeps_its_type():
    assert interpolate("${dim * 2}", lookup) == 192
    assert interpolate("  ${depths}  ", lookup) == [2, 2, 6, 2]
    assert interpolate("${shifted}", lookup) is True


def test_expressions_inside_text_become_text():
    assert interpolate("stage${s}_dim${dim}", lookup) == "stage2_dim96"
    assert interpolate("${s}${b}", lookup) == "21"


def test_offsets_are_relative_to_the_value():
    with pytest.raises(ExprError) as info:
        interpolate("ab ${dim} ${nope}", lookup, lambda: list(NAMES))
    assert info.value.offset == 12  # the n of nope
    with pytest.raises(ExprError) as info:
        interpolate("  ${1 // 0}", lookup)
    assert info.value.offset == 4


def test_unclosed_placeholder():
    with pytest.raises(ExprError) as info:
        interpolate("x ${dim", lookup)
    assert (info.value.message, info.value.offset) == ("'${' without a closing '}'", 2)


# -- text that spells a boolean, as a condition ---------------------------------------------------


@pytest.mark.parametrize("text", ["'x' if 'false' else 'y'", "not 'false'", "'0' and 1", "'no' or 1",
                                  "1 if 'True' else 2"])
def test_text_that_spells_a_boolean_is_refused_as_a_condition(text):
    """The SmolLM3 trial's `--set 'sliding="false"'` (or `params: {sliding: "false"}` in a spec
    that extends another) made `'sliding' if sliding else 'causal'` sliding: any text but '' is
    true as a condition."""
    found = err(text)
    assert "is text, not a boolean" in str(found) and "true or false without quotes" in (found.hint or "")


def test_other_text_and_real_booleans_stay_conditions():
    assert ev("'a' if kind else 'b'") == "a" and ev("'a' if '' else 'b'") == "b"
    assert ev("1 if shifted else 2") == 1 and ev("not shifted") is False
