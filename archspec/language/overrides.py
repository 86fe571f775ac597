"""`--set key=value` overrides of a spec's params, from the command line or the Python API.

A value given as text is parsed as YAML (`[2, 2, 18, 2]`, `${...}`); one given as a Python value
must be plain data a spec's YAML could hold. Each overridden value is placed on its own line of
a `<command line>` source, so errors in it point there.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from ..core.errors import Loc, SpecError, error
from .hints import some, suggest
from .limits import MAX_DEPTH, MAX_INT, MAX_VALUES
from .loader import Document, load_text

COMMAND_LINE = "<command line>"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_override(text: str) -> tuple[str, str]:
    """'key=value' from the command line; a usage error (ValueError) if malformed."""
    key, sep, value = text.partition("=")
    if not sep or not _KEY.fullmatch(key.strip()):
        raise ValueError(f"--set takes key=value, got {text!r}")
    return key.strip(), value


def plain_value_problem(value: Any) -> str | None:
    """What makes a value given as an override (through the Python API) one a spec's YAML could
    not hold: nesting, size, an infinite or NaN float, an integer beyond MAX_INT, a type that is
    not plain data. Walked without recursion; None when it is fine."""
    stack, count = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            return f"nesting deeper than {MAX_DEPTH} levels"
        if count > MAX_VALUES:
            return f"more than {MAX_VALUES} values"
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_INT:
                return "an integer too large: a spec's integers lie within +-2^63"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{item} is not a finite number; a spec's values are finite"
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict) and all(isinstance(k, str) for k in item):
            stack.extend((v, depth + 1) for v in item.values())
        else:
            return f"a {type(item).__name__} is not a spec value"
    return None


TRUE_WORDS = {"yes", "y", "on"}
YAML11_BOOLEANS = TRUE_WORDS | {"no", "n", "off"}  # booleans in YAML 1.1, words in archspec's YAML 1.2


def kind_mismatch(default: Any, given: Any) -> str | None:
    """Text given where the spec's param is a number (`--set rotary_pct=abc`: in an expression
    it would repeat the text, not fail); None when the kinds agree, or either is an expression
    or of another kind. A boolean's param may take words (`qkv_bias: ${qkv}` with `--set qkv=qv`),
    but not YAML 1.1's words for true and false: `--set fused=no` is the text 'no', which `${not
    fused}` reads as true (the FastViT trial's branch kept without a word)."""
    if not isinstance(given, str) or "${" in given:
        return None
    if isinstance(default, bool):
        if given.lower() in YAML11_BOOLEANS:
            return (f"the spec's value is {str(default).lower()}, and {given!r} is text, not a boolean (YAML 1.2 "
                    f"reads yes, no, on and off as words): write {'true' if given.lower() in TRUE_WORDS else 'false'}")
        return None
    if isinstance(default, (int, float)):
        nothing = " (for no value write null or ~)" if given.lower() == "none" else ""
        return f"the spec's value is a number ({default}); {given!r} is text{nothing}"
    return None


def _shown(value: Any) -> str:
    """An override as its `--set` line shows it (a value refused below is not printed whole)."""
    if isinstance(value, str):
        return value
    return str(value) if plain_value_problem(value) is None else f"<a {type(value).__name__}>"


def apply_overrides(doc: Document, overrides: Mapping[str, object]) -> Document:
    """Override params. String values are parsed as YAML (`[2, 2, 18, 2]`, `${...}`)."""
    params = doc.data.get("params") if isinstance(doc.data, dict) else None
    if not isinstance(params, dict):
        params = {}
    lines = [f"{k}={_shown(v)}" for k, v in overrides.items()]
    sources = {**doc.sources, COMMAND_LINE: "\n".join(lines)}
    data = dict(doc.data) if isinstance(doc.data, dict) else doc.data  # not a mapping: validation says so
    out = Document(doc.file, data, dict(doc.locs), dict(doc.key_locs), set(doc.quoted), sources)
    new_params = dict(params)
    problems = []
    for line_no, (key, value) in enumerate(overrides.items(), start=1):
        if key not in params:
            hint = suggest(key, params) or (f"params: {some(params)}" if params else "this spec has no params")
            problems.append(error(f"--set: unknown parameter '{key}'", Loc(COMMAND_LINE, line_no, 1), hint=hint))
            continue
        shift = len(key) + 1
        if isinstance(value, str):
            try:
                parsed = load_text(value if value.strip() else "null", COMMAND_LINE)
            except SpecError as exc:
                d = exc.diagnostics[0]
                col = (d.loc.col if d.loc else 1) + shift
                problems.append(error(d.message, Loc(COMMAND_LINE, line_no, col), hint=d.hint))
                continue
        else:
            where = Loc(COMMAND_LINE, line_no, 1)
            problem = plain_value_problem(value)
            if problem is not None:
                problems.append(error(f"--set {key}: {problem}", where, hint="give plain, finite values"))
                continue
            parsed = Document(COMMAND_LINE, value, {(): where})
        mismatch = kind_mismatch(params[key], parsed.data)
        if mismatch is not None:
            problems.append(error(f"--set {key}: {mismatch}", Loc(COMMAND_LINE, line_no, shift + 1),
                                  hint="give a value of the spec's kind, or an expression `${...}`"))
            continue
        out.drop_positions(("params", key))
        out.replaced.setdefault(key, params[key])
        new_params[key] = parsed.data
        for path, loc in parsed.locs.items():
            col = loc.col + shift if loc.line == 1 else loc.col
            out.locs[("params", key) + path] = Loc(COMMAND_LINE, line_no + loc.line - 1, col)
        out.quoted |= {("params", key) + p for p in parsed.quoted}
    if problems:
        raise SpecError([d for p in problems for d in p.diagnostics], sources)
    out.data["params"] = new_params
    return out
