"""Completion: what may be typed at the cursor of a spec, the line being typed half written.

Where the cursor is comes from the text alone (context.py); what the spec defines (its blocks,
params, node names) from the last check that loaded it (the text as it was then, maybe a few
keystrokes ago) and from the text now, read leniently. So it works on a document that does
not parse, and never raises on any text.

- at the top level: the spec's keys (`name`, `params`, `graph`, ...); in a block: its keys
- at a graph entry's key: the ops (every primitive, `graph`, the spec's blocks) and node keys
- at `kind:` of a primitive: its kinds
- inside a primitive's mapping: its parameters (of its kind, when `kind:` is given there);
  inside a block's use: the block's parameters
- in `from:` (and `tie:`): the names of the nodes that can be read there, and the inputs
- inside `${...}`: the params (and, inside a block, its parameters)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..language.schema import META_KEYS, BlockDef, SpecDoc
from ..language.validation import field_names
from ..primitives import registry
from ..language.param_types import value_at
from .analysis import Analysis, _item_at, _names
from .context import ITEM, Cursor, cursor_at
from .lines import line_in

GRAPH_LISTS = ("graph", "objectives")
MOST_ITEMS = 1000  # items in one answer (a spec may have 10,000 nodes)
KIND = re.compile(r"(?:^|[\s{,])kind:\s*([A-Za-z_]\w*)")


@dataclass(frozen=True)
class Completion:
    label: str
    kind: str  # key, op, block, kind, parameter, node, param (the server maps them to LSP kinds)
    detail: str = ""


@dataclass(frozen=True)
class Completions:
    """What may be typed at the cursor, and where the word they replace starts."""

    items: list[Completion]
    start: int
    cut: bool = False  # more matched than MOST_ITEMS: the editor asks again as more is typed


def complete(text: str, line: int, character: int, known: Analysis | None) -> Completions | None:
    """What may be typed at a 0-based position of `text`; `known`: the last check that loaded
    the spec (None: none has)."""
    cursor = cursor_at(text, line, character)
    if cursor is None:
        return None
    spec = Known(text, known)
    items = _items(cursor, spec, line)
    word = cursor.word
    matching = _first_of_each([item for item in items if item.label.startswith(word)] or items)
    return Completions(matching[:MOST_ITEMS], cursor.start, len(matching) > MOST_ITEMS)


def _first_of_each(items: list[Completion]) -> list[Completion]:
    """Each label once, as first found."""
    first: dict[str, Completion] = {}
    for item in items:
        first.setdefault(item.label, item)
    return list(first.values())


def _items(cursor: Cursor, spec: "Known", line: int) -> list[Completion]:
    keys = cursor.keys
    if cursor.expression is not None:
        return spec.params(_block_of(keys))
    if keys[-1:] in (("from",), ("tie",), ("weights_of",)) or keys[-2:] in (("from", ITEM), ("tie", ITEM)):
        return spec.nodes(line, _block_of(keys))
    if not keys:
        return [Completion(k, "key", "spec key") for k in _spec_keys()] if cursor.at_key else []
    if len(keys) == 2 and keys[0] == "blocks":
        return [Completion(k, "key", "block key") for k in BlockDef.model_fields] if cursor.at_key else []
    if keys[-1] == ITEM and len(keys) >= 2 and keys[-2] in GRAPH_LISTS and cursor.at_key:
        return _ops(spec)
    if len(keys) >= 3 and keys[-2] == ITEM and keys[-3] in GRAPH_LISTS and cursor.at_key:
        return _options(keys[-1], spec, cursor, line)
    if len(keys) >= 4 and keys[-1] == "kind" and keys[-3] == ITEM and not cursor.at_key:
        return _kinds(keys[-2])
    return []


def _block_of(keys: tuple) -> str | None:
    return keys[1] if len(keys) >= 2 and keys[0] == "blocks" else None


def _spec_keys() -> list[str]:
    return [field.alias or name for name, field in SpecDoc.model_fields.items()]


def _ops(spec: "Known") -> list[Completion]:
    items = [Completion(p, "op", _first_line(p)) for p in registry.primitives()]
    items += [Completion(b, "block", "block of this spec") for b in spec.blocks()]
    items.append(Completion("graph", "op", "an inline group: graph: [...]"))
    return items + [Completion(k, "key", "node key") for k in META_KEYS]


def _first_line(primitive: str) -> str:
    if registry.has_kinds(primitive):
        return f"{primitive}: kinds " + ", ".join(registry.kinds(primitive))
    return (registry.op(primitive).doc or primitive).strip().split("\n")[0]


def _kinds(primitive: str) -> list[Completion]:
    if primitive not in registry.primitives() or not registry.has_kinds(primitive):
        return []
    return [Completion(k, "kind", _doc_line(registry.op(primitive, k))) for k in registry.kinds(primitive)]


def _doc_line(op) -> str:
    return (op.doc or "").strip().split("\n")[0]


def _options(op_name: str, spec: "Known", cursor: Cursor, line: int) -> list[Completion]:
    """The parameters of the op whose mapping the cursor is in (a primitive or a block)."""
    if op_name in registry.primitives():
        if not registry.has_kinds(op_name):
            return [Completion(f, "parameter", op_name) for f in field_names(registry.op(op_name).Params)]
        kind = spec.kind_near(line, cursor)
        kinds = [kind] if kind in registry.kinds(op_name) else registry.kinds(op_name)
        fields = {f: k for k in reversed(kinds) for f in field_names(registry.op(op_name, k).Params)}
        detail = f"{op_name} (kind {kinds[0]})" if len(kinds) == 1 else op_name
        return [Completion(f, "parameter", detail) for f in fields]
    return [Completion(p, "parameter", f"block {op_name}") for p in spec.block_params(op_name)]


class Known:
    """What the spec defines, from the last check that loaded it and from the text now."""

    def __init__(self, text: str, known: Analysis | None):
        self.text = text
        self.lines = text.split("\n")
        self.known = known
        self.own = known.own if known is not None else None
        composed = known.attempt.document if known is not None else None
        self.data = (composed or self.own).data if (composed or self.own) is not None else None
        self.values = known.attempt.graph.params if known is not None and known.attempt.graph is not None else {}

    # -- by name ------------------------------------------------------------------------------------
    def blocks(self) -> list[str]:
        return _unique(_mapping_keys(self.data, ("blocks",)) + _children(self.lines, "blocks"))

    def block_params(self, block: str) -> list[str]:
        return _mapping_keys(self.data, ("blocks", block, "params"))

    def params(self, block: str | None) -> list[Completion]:
        items = []
        if block is not None:
            items += [Completion(p, "param", f"parameter of block {block}") for p in self.block_params(block)]
        for name in _unique(_mapping_keys(self.data, ("params",)) + _children(self.lines, "params")):
            value = self.values.get(name) if isinstance(self.values, dict) else None
            items.append(Completion(name, "param", f"= {value!r}" if value is not None else "param"))
        return items

    def kind_near(self, line: int, cursor: Cursor) -> str | None:
        """The `kind:` given in the mapping the cursor is in: on its line (a `{...}` there), or
        on the lines around it at its indentation."""
        here = KIND.search(self.lines[line])
        if here:
            return here.group(1)
        column = cursor.start
        for step in (-1, 1):
            number = line + step
            while 0 <= number < len(self.lines):
                text = self.lines[number]
                indent = len(text) - len(text.lstrip(" "))
                if text.strip() and indent < column:
                    break
                found = KIND.search(text) if indent == column else None
                if found:
                    return found.group(1)
                number += step
        return None

    # -- nodes --------------------------------------------------------------------------------------
    def nodes(self, line: int, block: str | None) -> list[Completion]:
        """The names a `from:` at `line` can read: the nodes of its graph and the graphs around
        it (in a block: its own and its inputs), and the spec's inputs."""
        found = self._scoped(line)
        if found is None:
            found = self._all(block)
        found += [(m, "input") for m in _children(self.lines, "inputs") if block is None]
        return [Completion(name, "node", what) for name, what in _unique_pairs(found)]

    def _scoped(self, line: int) -> list[tuple[str, str]] | None:
        if self.own is None or not isinstance(self.own.data, dict):
            return None
        old = _old_line(self.known.text, self.text, line)
        item = _item_at(self.own, self.known.text.split("\n"), old) if old is not None else None
        if item is None:
            return None
        found, scope, own = [], item[:-1], item[-1]
        data = self.own.data
        while scope:
            if isinstance(value_at(data, scope), list):
                found += [(n, "node") for i, n in enumerate(_names(data, scope)) if n and i != own]
            if scope[0] == "blocks" and len(scope) == 3:
                inputs = value_at(data, scope[:2] + ("inputs",))
                return found + [(i, "block input") for i in (inputs if isinstance(inputs, list) else ["x"])]
            own = scope[-2] if len(scope) >= 2 and isinstance(scope[-2], int) else None
            scope = scope[:-2] if own is not None else ()
        return found + [(i, "input") for i in _mapping_keys(self.data, ("inputs",))]

    def _all(self, block: str | None) -> list[tuple[str, str]]:
        data = self.own.data if self.own is not None else None
        path = ("blocks", block, "graph") if block else ("graph",)
        names = _names(data, path) if isinstance(value_at(data, path), list) else []
        found = [(n, "node") for n in names if n]
        found += [(m.group(1), "node") for m in re.finditer(r"\bid:\s*([A-Za-z_]\w*)", self.text)]
        if block:
            inputs = value_at(data, ("blocks", block, "inputs"))
            found += [(i, "block input") for i in (inputs if isinstance(inputs, list) else ["x"])]
        return found


def _old_line(old: str, new: str, line: int) -> int | None:
    """The line of the old text that holds the new text's `line`, or the nearest line above it
    that is unchanged (a line being typed into a node is in that node's item)."""
    for candidate in range(line, -1, -1):
        found = line_in(old, new, candidate)
        if found is not None:
            return found
    return None


def _mapping_keys(data: Any, path: tuple) -> list[str]:
    value = value_at(data, path)
    return [str(k) for k in value] if isinstance(value, dict) else []


def _children(lines: list[str], top: str) -> list[str]:
    """The keys under a top-level key, read from the text (for names typed since the last check)."""
    found, inside, indent = [], False, None
    for text in lines:
        if re.match(rf"{re.escape(top)}\s*:\s*(#.*)?$", text):
            inside, indent = True, None
            continue
        if not inside or not text.strip() or text.lstrip().startswith("#"):
            continue
        here = len(text) - len(text.lstrip(" "))
        if here == 0:
            inside = False
            continue
        indent = here if indent is None else indent
        key = re.match(r"\s*([A-Za-z_][\w-]*)\s*:", text)
        if here == indent and key:
            found.append(key.group(1))
    return found


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _unique_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each name once, as first found."""
    first: dict[str, tuple[str, str]] = {}
    for name, what in pairs:
        first.setdefault(name, (name, what))
    return list(first.values())
