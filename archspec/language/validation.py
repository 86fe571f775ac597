"""Validation errors (core/declared.py words them as pydantic does) turned into located,
plain-language diagnostics: one per offending value, pointing at the value (or the key) in the
YAML, with a hint where one helps.

`diagnostics_from` groups the errors by the value they are about, drops those another
error explains (a misspelt key explains the "missing" key it was meant to be; a union
member's "not a list" beside a real problem inside the value), and asks the explainers below,
in order, to word each group.
"""

from __future__ import annotations

import difflib
import os
import types
from dataclasses import dataclass
from typing import Any, Callable, Union, get_args, get_origin

from ..core.declared import Model, ValidationError
from ..core.errors import Diagnostic
from ..core.words import DidYouMean, did_you_mean, one_of
from .loader import Document
from .schema import IDENTIFIER, NAME_RULE, NodeMeta

_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "none_required": "empty (null)",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}

# Node keys that also take an expression: say so instead of "or a string".
_META_EXPECTED = {"repeat": "a whole number or an expression ${...}", "if": "true, false or an expression ${...}",
                  "unused": "true, false or an expression ${...}"}


def describe_value(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    if isinstance(value, str):
        return f"'{value}'" if len(value) < 40 else f"'{value[:37]}...'"
    return repr(value)


# -- where an error points ---------------------------------------------------------------------


def _data_path(loc: tuple, data: Any, err_type: str = "") -> tuple[tuple, bool]:
    """The part of an error loc that indexes into the data (drops union member labels),
    and whether the error is about a mapping's key (rather than its value)."""
    path, node, is_key = [], data, False
    for i, part in enumerate(loc):
        if part == "[key]" and i == len(loc) - 1:
            is_key = True
        elif isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and i == len(loc) - 1 and err_type == "missing":
            path.append(part)  # a missing key
        # anything else is a union member's label: skip it
    return tuple(path), is_key


def _members(annotation: Any) -> tuple:
    """The members of a Union (Optional included), or the annotation alone."""
    return get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)


def _is_model(annotation: Any) -> bool:
    """A declared Model, or a pydantic model (compiler/weights/mapping_file.py's): both say their
    fields in `model_fields`."""
    return isinstance(annotation, type) and (issubclass(annotation, Model) or hasattr(annotation, "model_fields"))


def _step(annotation: Any, part: Any) -> Any:
    """The annotation one path part down: a model's field, or a list's or dict's item."""
    for member in _members(annotation):
        if get_origin(member) in (list, dict):
            return get_args(member)[-1]
        if _is_model(member):
            field = member.model_fields.get(part) or next(
                (f for f in member.model_fields.values() if f.alias == part), None)
            if field is not None:
                return field.annotation
    return None


def _model_holding(model: Any, path: tuple) -> Any:
    """The model whose mapping holds the last key of `path` (None when that is no model: a dict's
    free keys, or a path the schema does not describe)."""
    for part in path[:-1]:
        model = _step(model, part)
        if model is None:
            return None
    return next((m for m in _members(model) if _is_model(m)), None)


def field_names(model: Any) -> list[str]:
    if _is_model(model):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []


# -- wording the errors about one value -------------------------------------------------------------------


@dataclass
class _ValueErrors:
    """The errors about one value, and what is needed to word them."""

    path: tuple
    errs: list[dict]
    is_key: bool
    doc: Document
    base: tuple
    model: Any
    what: str
    node_path: str | None
    elsewhere: Callable[[str], str | None] | None  # a hint naming where an unknown key belongs

    @property
    def types(self) -> set[str]:
        return {e["type"] for e in self.errs}

    @property
    def got(self) -> Any:
        return self.errs[0].get("input")

    @property
    def name(self) -> str:
        return "`" + ".".join(str(p) for p in self.path) + "`" if self.path else (self.what or "the value")

    @property
    def where(self) -> str:
        if not (self.what and self.path):
            return ""
        if self.what == "the spec" and len(self.path) > 2 and self.path[0] == "blocks":
            return f" in block '{self.path[1]}'"
        return f" in {self.what}"

    def at(self, message: str, hint: str | None = None, key: bool = False, path: tuple | None = None) -> Diagnostic:
        path = self.path if path is None else path
        return Diagnostic(message, self.doc.loc(self.base + path, key=key), self.node_path, hint)


def _bad_key(g: _ValueErrors) -> Diagnostic | None:
    if not g.is_key:
        return None
    parent = "`" + ".".join(str(p) for p in g.path[:-1]) + "`" if g.path[:-1] else "the spec"
    return g.at(f"'{g.path[-1]}' is not a valid name in {parent}", f"names use {NAME_RULE}", key=True)


def _unknown_key(g: _ValueErrors) -> Diagnostic | None:
    if "extra_forbidden" not in g.types:
        return None
    allowed = field_names(_model_holding(g.model, g.path))
    key = g.path[-1]
    op_param = bool(g.elsewhere) and len(g.path) == 1  # a parameter of a primitive's node
    hint = ((g.elsewhere(key) if op_param else None) or did_you_mean(key, allowed)
            or (f"allowed keys: {one_of(allowed)}" if allowed else None))
    if op_param and isinstance(hint, DidYouMean) and str(key).startswith(f"{hint.meant}_"):  # hidden_norm
        hint = DidYouMean(key, hint.meant, f"If not: {g.what} has no option '{key}'; what it does not take can be "
                                           f"written out of general ops (specs/README.md, 5.8)")
    where = g.where
    if g.what == "the spec" and len(g.path) > 1 and g.path[0] != "blocks":
        where = " in `" + ".".join(str(p) for p in g.path[:-1]) + "`"  # in `timm_args.in_chans`
    return g.at(f"unknown key '{key}'{where}", hint, key=True)


def _missing(g: _ValueErrors) -> Diagnostic | None:
    if "missing" not in g.types:
        return None
    return g.at(f"missing required {g.name}{g.where}", key=True, path=g.path[:-1])


BLOCK_INPUTS_HINT = ("a block reads at least one input; a block that makes constants alone (a position generator) "
                     "may take one and not read it, used with `from:` any node, e.g. `from: image`")


def length_bounds(g: _ValueErrors) -> tuple | None:
    """(min_length, max_length) the field holding the value declares, or None where no model says."""
    model = _model_holding(g.model, g.path)
    field = model.model_fields.get(g.path[-1]) if model is not None and g.path else None
    constraints = getattr(field, "constraints", None)
    return None if constraints is None else (constraints.get("min_length"), constraints.get("max_length"))


def _empty(g: _ValueErrors) -> Diagnostic | None:
    """A list or mapping shorter or longer than its field allows: empty, or of how many items."""
    sized = next((e for e in g.errs if e["type"] in ("too_short", "too_long")), None)
    if sized is None:
        return None
    ctx = sized.get("ctx") or {}
    got, least, most = ctx.get("actual_length"), ctx.get("min_length"), ctx.get("max_length")
    if sized["type"] == "too_short" and (least or 0) <= 1:
        block_inputs = len(g.path) >= 3 and g.path[-3] == "blocks" and g.path[-1] == "inputs"
        return g.at(f"{g.name} must not be empty", BLOCK_INPUTS_HINT if block_inputs else None)
    declared = length_bounds(g)
    low, high = declared if declared and declared != (None, None) else (least, most)  # a union member's own bounds
    wanted = (f"{low}" if low == high and low is not None else f"at least {low}" if high is None else
              f"at most {high}" if low is None else f"{low} to {high}")
    return g.at(f"{g.name} takes {wanted} items, got {got}")


def _not_a_name(g: _ValueErrors) -> Diagnostic | None:
    if "string_pattern_mismatch" in g.types and g.errs[0].get("ctx", {}).get("pattern") == IDENTIFIER:
        return g.at(f"{g.name} must be a name ({NAME_RULE}); got {describe_value(g.got)}")
    return None


def _meta_expression(g: _ValueErrors) -> Diagnostic | None:
    if g.model is NodeMeta and len(g.path) == 1 and g.path[0] in _META_EXPECTED:
        return g.at(f"{g.name} must be {_META_EXPECTED[g.path[0]]}; got {describe_value(g.got)}")
    return None


def _constraint(g: _ValueErrors) -> Diagnostic | None:
    """A value of the right type outside its bounds (gt, le, ...)."""
    constraint = [e for e in g.errs if e["type"] not in _EXPECTED and e["type"] != "literal_error"]
    if not constraint:
        return None
    err = constraint[0]
    message = err["msg"][0].lower() + err["msg"][1:]
    message = message.replace("input should", "must").replace("value error, ", "")
    return g.at(f"{g.name} {message}; got {describe_value(err.get('input'))}")


def _expectation(err: dict) -> str:
    if err["type"] == "literal_error":
        return err.get("ctx", {}).get("expected", "")
    return _EXPECTED.get(err["type"], "")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _wrong_type_hint(g: _ValueErrors, expected: list[str]) -> str | None:
    got = g.got
    if isinstance(got, str) and "true or false" in expected and got.lower() in ("yes", "no", "on", "off", "y", "n"):
        return f"write true or false; '{got}' is a string in YAML 1.2"
    if "literal_error" in g.types and isinstance(got, str):
        choices = [c.strip(" '") for e in g.errs if e["type"] == "literal_error"
                   for c in _expectation(e).replace(" or ", ", ").split(",")]
        return did_you_mean(got, choices)
    if isinstance(got, str) and got.lower() in ("none", "null") and _takes_null(g):
        return f"for no value write null or ~ ('{got}' is text in YAML), or leave the option out for its default"
    if isinstance(got, float) and "an integer" in expected and got == int(got):
        return f"write {int(got)}; in expressions, // divides to a whole number and int(...) makes one"
    if isinstance(got, str) and any(t in expected for t in ("an integer", "a number")) and _is_number(got):
        if (g.base + g.path) in g.doc.quoted:
            return "write numbers without quotes; expressions go in ${...}"
        return _quoted_param_hint(g.doc, got)
    return None


def _quoted_param_hint(doc: Document, got: str) -> str | None:
    """Where a number written in quotes in params, now text, came from (a value `${...}` read)."""
    params = doc.data.get("params") if isinstance(doc.data, dict) else None
    names = [name for name, value in (params or {}).items() if value == got and ("params", name) in doc.quoted]
    if not names:
        return None
    loc = doc.loc(("params", names[0]))
    where = f" ({os.path.basename(loc.file)}:{loc.line})" if loc is not None else ""
    return f"params.{names[0]}{where} is the text '{got}': write it without quotes"


def _takes_null(g: _ValueErrors) -> bool:
    """Whether the value's field takes null (an Optional annotation)."""
    holder = _model_holding(g.model, g.path) if g.path else None
    field = holder.model_fields.get(g.path[-1]) if holder is not None else None
    return field is not None and type(None) in get_args(field.annotation)  # X | None and Optional[X] alike


def _wrong_type(g: _ValueErrors) -> Diagnostic:
    expected = []
    for e in g.errs:
        text = _expectation(e)
        if text and text not in expected:
            expected.append(text)
    return g.at(f"{g.name} must be {' or '.join(expected)}; got {describe_value(g.got)}",
                _wrong_type_hint(g, expected))


_EXPLAINERS = (_bad_key, _unknown_key, _missing, _empty, _not_a_name, _meta_expression, _constraint)


def _explain(g: _ValueErrors) -> Diagnostic:
    for explain in _EXPLAINERS:
        diag = explain(g)
        if diag is not None:
            return diag
    return _wrong_type(g)


# -- all errors of one validation ----------------------------------------------------------------


def diagnostics_from(exc: ValidationError, data: Any, doc: Document, base: tuple, model: Any, what: str = "",
                     node_path: str | None = None,
                     elsewhere: Callable[[str], str | None] | None = None) -> list[Diagnostic]:
    """Turn one ValidationError into plain diagnostics, one per offending value.

    `elsewhere(key)` may name where an unknown top-level key belongs (another kind of the
    same primitive)."""
    groups: dict[tuple, list[dict]] = {}
    for err in exc.errors(include_url=False):
        groups.setdefault(_data_path(err["loc"], data, err["type"]), []).append(err)
    # A value that one member of a union accepted as a container, with a problem inside it: report
    # the problem inside, not that the value is not the other members' types.
    # (One set of every path that lies around another: a spec with thousands of errors stays linear.)
    around = {path[:n] for path, _ in groups for n in range(len(path))}
    groups = {(path, is_key): errs for (path, is_key), errs in groups.items()
              if not (all(e["type"] in _EXPECTED for e in errs) and path in around)}
    # A misspelt key explains the required key it was meant to be: report only the misspelling.
    meant = set()
    for (path, _), errs in groups.items():
        if any(e["type"] == "extra_forbidden" for e in errs):
            allowed = field_names(_model_holding(model, path))
            close = difflib.get_close_matches(str(path[-1]), allowed, n=1, cutoff=0.6)
            if close:
                meant.add(path[:-1] + (close[0],))
    return [_explain(_ValueErrors(path, errs, is_key, doc, base, model, what, node_path, elsewhere))
            for (path, is_key), errs in groups.items()
            if not (path in meant and all(e["type"] == "missing" for e in errs))]
