"""Declared types and allowed values of a spec's params (`param_types:`), and the keywords of
timm's create_model a spec maps onto its params (`timm_args:`).

    params: {norm: layer, heads: 4}
    param_types:
      norm: {type: str, choices: [layer, batch]}
      heads: {type: int}

A param's value (its default, a `--set`, a create_model keyword, or what its expression gives)
must have the declared type and be one of the choices; a did-you-mean names the closest choice.
An `if:` that compares a param with a value it can never take is a warning: that node is always
(or never) kept, which is rarely what the comparison meant.
"""

from __future__ import annotations

import ast
from typing import Any

from ..core.errors import Diagnostic, warning
from .expressions import _PLACEHOLDER
from .hints import suggest

TYPES = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "text", "list": "a list"}
# timm.create_model's keywords a spec may map onto its params (archspec/models.py reads the table)
TIMM_KEYWORDS = ("img_size", "in_chans", "num_classes", "drop_path_rate", "drop_rate", "global_pool")


def has_type(value: Any, kind: str | None) -> bool:
    if kind is None:
        return True
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"bool": bool, "str": str, "list": list}[kind])


def value_problem(name: str, value: Any, declared) -> tuple[str, str | None] | None:
    """(message, hint) when `value` is not one param `name` may take under `declared` (a ParamType)."""
    if not has_type(value, declared.type):
        return f"param '{name}' is {TYPES[declared.type]} ({declared.type}); {value!r} is not", None
    if item_choices(declared) and isinstance(value, list):
        return item_problem(name, value, declared.choices)
    if declared.choices is not None and value not in declared.choices:
        hint = suggest(value, declared.choices) if isinstance(value, str) else None
        choices = ", ".join(repr(c) for c in declared.choices)
        return f"param '{name}' takes one of {choices}; {value!r} is not one of them", hint
    return None


def item_choices(declared) -> bool:
    """Whether `choices` are the values each item of a list param may take (LFM2's layer_types:
    {type: list, choices: [conv, full_attention]}): a list param whose choices are no lists."""
    return declared.type == "list" and declared.choices is not None and not any(
        isinstance(choice, list) for choice in declared.choices)


def item_problem(name: str, value: list, choices: list) -> tuple[str, str | None] | None:
    """(message, hint) for the first item of a list param that is not one of `choices`."""
    for index, item in enumerate(value):
        if item not in choices:
            hint = suggest(item, choices) if isinstance(item, str) else None
            listed = ", ".join(repr(c) for c in choices)
            return f"param '{name}' holds items among {listed}; item {index} ({item!r}) is not one of them", hint
    return None


def can_take(value: Any, declared) -> bool:
    """Whether a param declared so can ever equal `value`."""
    if item_choices(declared):
        return isinstance(value, list) and all(item in declared.choices for item in value)
    if declared.choices is not None:
        return value in declared.choices
    if declared.type in ("int", "float"):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and (
            declared.type == "float" or float(value).is_integer())
    return has_type(value, declared.type)


def never_taken(text: str, declared: dict, hidden: set[str]) -> list[tuple[str, Any]]:
    """(param, value) of each comparison `param == value` / `!=` / `in [...]` in an expression's
    text (between `${` and `}`) with a value that param can never take; names in `hidden` (block
    parameters, loop indices) are not the spec's params."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # evaluation reports it
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if isinstance(right, ast.Name) and isinstance(left, ast.Constant) and isinstance(op, (ast.Eq, ast.NotEq)):
            left, right = right, left
        if not isinstance(left, ast.Name) or left.id not in declared or left.id in hidden:
            continue
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
            values = [right.value]
        elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.List, ast.Tuple)):
            values = [e.value for e in right.elts if isinstance(e, ast.Constant)]
        else:
            continue
        found += [(left.id, v) for v in values if not can_take(v, declared[left.id])]
    return found


def condition_warnings(doc, spec) -> list[Diagnostic]:
    """Warnings for the `if:`s of the spec (its graph, blocks and objectives) that compare a
    declared param with a value it can never take."""
    if not spec.param_types:
        return []
    found = []
    for path, loc in list(doc.locs.items()):
        if not path or path[-1] != "if" or path[0] not in ("graph", "blocks", "objectives"):
            continue
        text = value_at(doc.data, path)
        if not isinstance(text, str):
            continue
        hidden = set(spec.blocks[path[1]].params) if path[0] == "blocks" and path[1] in spec.blocks else set()
        for match in _PLACEHOLDER.finditer(text):
            for name, value in never_taken(match.group(1), spec.param_types, hidden):
                declared = spec.param_types[name]
                takes = (", ".join(repr(c) for c in declared.choices) if declared.choices is not None
                         else TYPES[declared.type])
                hint = suggest(value, declared.choices) if isinstance(value, str) and declared.choices else None
                found.append(warning(f"this `if` compares param '{name}' with {value!r}, which it can never be "
                                     f"(it takes {takes}): the comparison always gives the same answer", loc,
                                     hint=hint or "compare with one of the param's choices"))
    return found


def value_at(data: Any, path: tuple) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data
