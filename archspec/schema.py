"""The spec document's structure as pydantic models, and pydantic errors turned into located,
plain-language diagnostics.

Nodes of `graph` and of blocks are validated in expand (a node's op may be a user's block,
and its parameters may hold `${...}` expressions that are evaluated first); this module
validates everything around them.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .diagnostics import Diagnostic, did_you_mean, one_of
from .loader import Document

FORMAT_VERSION = 1
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
Name = Annotated[str, Field(pattern=IDENTIFIER)]  # a key that names something: letters, digits, _


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True, defer_build=True)


class InputDecl(Strict):
    shape: list[Union[int, str]] = Field(
        description="[B, ...]: integers, `B`, a dim declared under `dims`, or an expression over params")
    dtype: Literal["float32", "int64"] = "float32"
    grid: list[int] | None = Field(None, description="tokens input: the (H, W) grid the tokens lie on")


class BlockDef(Strict):
    doc: str = ""
    params: dict[Name, Any] = Field(default_factory=dict,
                                    description="parameters with defaults; a null default means required")
    inputs: list[Name] = Field(default_factory=lambda: ["x"], min_length=1,
                               description="names the block's nodes read its inputs by")
    graph: list[dict[str, Any]] = Field(min_length=1)


class SpecDoc(Strict):
    archspec: Literal[1] = Field(FORMAT_VERSION, description="spec format version")
    name: str = Field(pattern=IDENTIFIER)
    doc: str = ""
    extends: str | None = Field(None, description="path of a spec this one starts from (relative to this file)")
    params: dict[Name, Any] = Field(default_factory=dict, description="named values, usable anywhere as ${name}")
    dims: dict[Name, list[int]] = Field(default_factory=dict,
                                        description="symbolic sizes with their range, e.g. S: [1, 512]")
    inputs: dict[Name, Union[InputDecl, list[Union[int, str]]]] = Field(min_length=1)
    blocks: dict[Name, BlockDef] = Field(default_factory=dict)
    graph: list[dict[str, Any]] = Field(min_length=1)
    outputs: Union[list[str], dict[Name, str], None] = Field(
        None, description="nodes the compiled module returns (default: the last node)")


META_KEYS = ("id", "from", "repeat", "as", "if", "doc")


class NodeMeta(Strict):
    """The keys of a graph node besides its op."""

    id: str | None = Field(None, pattern=IDENTIFIER, description="name of the node (its path segment)")
    from_: Union[str, list[str], None] = Field(None, alias="from", description="node(s) this node reads")
    repeat: Union[int, str, None] = Field(None, description="repeat the node N times, chained")
    as_: str | None = Field(None, alias="as", pattern=IDENTIFIER, description="name of the repeat index (default i)")
    if_: Union[bool, str, None] = Field(None, alias="if", description="keep the node only if this is true")
    doc: str | None = None


# -- pydantic errors -> diagnostics ---------------------------------------------------------------

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


def _is_tagged_union(model: Any) -> bool:
    return hasattr(model, "__metadata__") and get_origin(model.__origin__) is Union


def _select(model: Any, data: Any) -> Any:
    """For a discriminated union, the member that `data['kind']` selects (else the model)."""
    if _is_tagged_union(model) and isinstance(data, dict):
        for member in get_args(model.__origin__):
            if data.get("kind") in get_args(member.model_fields["kind"].annotation):
                return member
    return model


def _kinds(model: Any) -> list[str]:
    if not _is_tagged_union(model):
        return []
    return [get_args(m.model_fields["kind"].annotation)[0] for m in get_args(model.__origin__)]


def _data_path(loc: tuple, data: Any, model: Any, err_type: str = "") -> tuple[tuple, bool]:
    """The part of a pydantic error loc that indexes into the data (drops union member labels),
    and whether the error is about a mapping's key (rather than its value)."""
    if _is_tagged_union(model) and loc and isinstance(data, dict) and loc[0] == data.get("kind"):
        loc = loc[1:]
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


def _unwrap(annotation: Any, key: Any) -> Any:
    """The model behind a field annotation (through Optional, Union, list and dict)."""
    origin = get_origin(annotation)
    if origin is Union:
        for arg in get_args(annotation):
            found = _unwrap(arg, key)
            if found is not None:
                return found
        return None
    if origin in (list, dict):
        return get_args(annotation)[-1]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _model_holding(model: Any, path: tuple, data: Any) -> Any:
    """The model whose mapping holds the last key of `path`."""
    for part in path[:-1]:
        model = _select(model, data)
        data = data[part] if isinstance(data, (dict, list)) else None
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(part) or next(
                (f for f in model.model_fields.values() if f.alias == part), None)
            model = _unwrap(field.annotation, part) if field else None
        elif get_origin(model) in (list, dict):
            model = get_args(model)[-1]
        if model is None:
            return None
    return _select(model, data)


def _other_kinds(path: tuple, model: Any) -> str | None:
    """`window` under `kind: global`: say which kinds take that key."""
    if len(path) != 1 or not _is_tagged_union(model):
        return None
    kinds = [get_args(m.model_fields["kind"].annotation)[0] for m in get_args(model.__origin__)
             if path[0] in _field_names(m)]
    if not kinds:
        return None
    return f"'{path[0]}' is a parameter of kind{'s' if len(kinds) > 1 else ''} {one_of(kinds)}"


def _field_names(model: Any) -> list[str]:
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []


def diagnostics_from(exc: ValidationError, data: Any, doc: Document, base: tuple, model: Any,
                     what: str = "", node_path: str | None = None) -> list[Diagnostic]:
    """Turn one pydantic ValidationError into plain diagnostics, one per offending value."""
    groups: dict[tuple, list[dict]] = {}
    for err in exc.errors(include_url=False):
        groups.setdefault(_data_path(err["loc"], data, model, err["type"]), []).append(err)
    # A value that one member of a union accepted as a container, with a problem inside it: report
    # the problem inside, not that the value is not the other members' types.
    deeper = [path for path, _ in groups]
    groups = {(path, is_key): errs for (path, is_key), errs in groups.items()
              if not (all(e["type"] in _EXPECTED for e in errs)
                      and any(len(d) > len(path) and d[:len(path)] == path for d in deeper))}
    # A misspelt key explains the required key it was meant to be: report only the misspelling.
    meant = set()
    for (path, is_key), errs in groups.items():
        if any(e["type"] == "extra_forbidden" for e in errs):
            allowed = _field_names(_model_holding(model, path, data))
            close = difflib.get_close_matches(str(path[-1]), allowed, n=1, cutoff=0.6)
            if close:
                meant.add(path[:-1] + (close[0],))
    return [_one(path, errs, data, doc, base, model, what, node_path, is_key)
            for (path, is_key), errs in groups.items()
            if not (path in meant and all(e["type"] == "missing" for e in errs))]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _expectation(err: dict) -> str:
    if err["type"] == "literal_error":
        return err.get("ctx", {}).get("expected", "")
    return _EXPECTED.get(err["type"], "")


_NAME_RULE = "letters, digits and _, not starting with a digit"

# Node keys that also take an expression: say so instead of "or a string".
_META_EXPECTED = {"repeat": "a whole number or an expression ${...}", "if": "true, false or an expression ${...}"}


def _one(path, errs, data, doc, base, model, what, node_path, is_key=False) -> Diagnostic:
    name = "`" + ".".join(str(p) for p in path) + "`" if path else (what or "the value")
    where = f" in {what}" if what and path else ""
    types = {e["type"] for e in errs}
    first = errs[0]
    got = first.get("input")
    value_loc = doc.loc(base + path)
    if is_key:
        parent = "`" + ".".join(str(p) for p in path[:-1]) + "`" if path[:-1] else "the spec"
        return Diagnostic(f"'{path[-1]}' is not a valid name in {parent}", doc.loc(base + path, key=True),
                          node_path, f"names use {_NAME_RULE}")
    if "extra_forbidden" in types:
        allowed = _field_names(_model_holding(model, path, data))
        hint = _other_kinds(path, model) or did_you_mean(path[-1], allowed) or (
            f"allowed keys: {one_of(allowed)}" if allowed else None)
        return Diagnostic(f"unknown key '{path[-1]}'{where}", doc.loc(base + path, key=True), node_path, hint)
    if "missing" in types:
        return Diagnostic(f"missing required {name}{where}", doc.loc(base + path[:-1], key=True), node_path)
    if "too_short" in types:
        return Diagnostic(f"{name} must not be empty", value_loc, node_path)
    if "string_pattern_mismatch" in types and first.get("ctx", {}).get("pattern") == IDENTIFIER:
        return Diagnostic(f"{name} must be a name ({_NAME_RULE}); got {describe_value(got)}", value_loc,
                          node_path)
    if model is NodeMeta and len(path) == 1 and path[0] in _META_EXPECTED:
        return Diagnostic(f"{name} must be {_META_EXPECTED[path[0]]}; got {describe_value(got)}", value_loc,
                          node_path)
    if types & {"union_tag_invalid", "union_tag_not_found"}:
        union = _model_holding(model, path + ("kind",), data) if path else model
        choices = _kinds(union) or _kinds(model)
        if "union_tag_not_found" in types:
            return Diagnostic(f"missing `kind`{' of ' + what if what else ''}", value_loc, node_path,
                              f"kinds: {one_of(choices)}")
        tag = first.get("ctx", {}).get("tag")
        return Diagnostic(f"unknown kind '{tag}'{' of ' + what if what else ''}", doc.loc(base + path + ("kind",)),
                          node_path, did_you_mean(tag, choices) or f"kinds: {one_of(choices)}")
    constraint = [e for e in errs if e["type"] not in _EXPECTED and e["type"] != "literal_error"]
    if constraint:
        err = constraint[0]
        message = err["msg"][0].lower() + err["msg"][1:]
        message = message.replace("input should", "must").replace("value error, ", "")
        return Diagnostic(f"{name} {message}; got {describe_value(err.get('input'))}", value_loc, node_path)
    expected = []
    for e in errs:
        text = _expectation(e)
        if text and text not in expected:
            expected.append(text)
    hint = None
    if "literal_error" in types and isinstance(got, str):
        choices = [c.strip(" '") for e in errs if e["type"] == "literal_error"
                   for c in _expectation(e).replace(" or ", ", ").split(",")]
        hint = did_you_mean(got, choices)
    elif isinstance(got, float) and "an integer" in expected and got == int(got):
        hint = f"write {int(got)}; in expressions, // divides to a whole number"
    elif isinstance(got, str) and any(t in expected for t in ("an integer", "a number")):
        if (base + path) in doc.quoted and _is_number(got):
            hint = "write numbers without quotes; expressions go in ${...}"
    elif isinstance(got, str) and "true or false" in expected and got.lower() in ("yes", "no", "on", "off", "y", "n"):
        hint = f"write true or false; '{got}' is a string in YAML 1.2"
    return Diagnostic(f"{name} must be {' or '.join(expected)}; got {describe_value(got)}", value_loc, node_path,
                      hint)
