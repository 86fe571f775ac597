"""What the language server knows about one open spec, without any LSP machinery: its
diagnostics (archspec's own, located), what a position's node computes (hover), and where a
name used at a position is defined (go to definition).

Positions here are 0-based (line, character), as in LSP; archspec's `Loc` is 1-based.

- Diagnostics: every error and warning of `check`, at the key or value it points at; those in
  another file (a base spec named by `extends`) are shown at the top of this one, naming where.
- Hover: the node item under the cursor (a primitive, an inline group, a block use, or a node
  inside a block definition) is matched to the IR nodes it became by its path pattern (ids,
  any repeat copy, any use of the block), and shows their output shape, grid, params and FLOPs.
  When the spec has errors, the IR is that of the nodes that expand past them (expand_partial).
  A param (its key, or its name inside `${...}`) shows its value.
- Definition: a `from:` entry, an `outputs` path or a node-naming parameter (`tie`) goes to
  the node it names (looked up as expansion does: this graph, then the graphs around it; in a
  block, its inputs); a block's name used as an op goes to its definition; `extends` to the file;
  a name inside `${...}` to the param (or block parameter, or dim) it reads.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ..core.errors import Diagnostic, Loc, SpecError
from ..core.ir import Graph
from ..core.words import DidYouMean
from ..language.compose import compose
from ..language.expand import expand_partial
from ..language.loader import Document, load_text
from ..language.paths import named_file
from ..language.names import node_names, taken_names
from ..language.param_types import value_at
from ..language.schema import META_KEYS
from ..pipeline import Attempt, PartialCosting, attempt_document
from ..primitives.infer import infer
from ..report import human

REFERENCE_KEYS = ("from", "weights_of", "tie")  # values that name nodes (besides `outputs`)
MOST_ROWS = 8


@dataclass
class Analysis:
    path: str  # the file (its name in diagnostics; `extends` is read relative to it)
    text: str
    own: Document | None  # the file alone, as loaded (None: it is not valid YAML)
    attempt: Attempt
    partial: Graph | None = None  # when the check failed before the IR: the nodes that expand (see graph_of)
    tried_partial: bool = False


@dataclass(frozen=True)
class Place:
    path: str  # a file
    line: int  # 0-based
    character: int


@dataclass(frozen=True)
class Found:
    """A diagnostic placed in this file: 0-based range, severity, text."""

    line: int
    start: int
    end: int
    severity: str
    message: str
    fix: tuple[str, str] | None = None  # a did-you-mean: (the word as written, the word meant)


SPEC_KEY = re.compile(r"^(archspec|graph|extends|blocks)\s*:", re.MULTILINE)


def looks_like_spec(text: str) -> bool:
    """Whether a YAML text is an archspec spec (a top-level `archspec`, `graph`, `extends` or
    `blocks` key): editors hand the server every YAML file, and CI files are none of its business."""
    return bool(SPEC_KEY.search(text))


def analyse(text: str, path: str) -> Analysis:
    """Check the text of the spec at `path` (the editor's text, saved or not)."""
    try:
        own = load_text(text, path)
    except SpecError as exc:
        return Analysis(path, text, None, Attempt(None, None, exc))
    return Analysis(path, text, own, attempt_document(own))


# -- diagnostics -------------------------------------------------------------------------------------
def diagnostics(analysis: Analysis) -> list[Found]:
    found = []
    lines = analysis.text.splitlines()
    every = list(analysis.attempt.error.diagnostics) if analysis.attempt.error else []
    if analysis.attempt.report is not None:
        every += analysis.attempt.report.warnings
    elif analysis.attempt.graph is not None:
        every += analysis.attempt.graph.warnings
    for d in every:
        message = d.message if not d.path else f"{d.path}: {d.message}"
        if d.hint:
            message += f"\nhint: {d.hint}"
        if d.loc is not None and _same_file(d.loc.file, analysis.path):
            line = min(max(d.loc.line - 1, 0), max(len(lines) - 1, 0))
            text = lines[line] if lines else ""
            start = min(d.loc.col - 1, len(text))
            found.append(Found(line, start, token_end(text, start), d.severity, message, _fix(d)))
        else:
            where = f"{d.loc}: " if d.loc else ""
            found.append(Found(0, 0, len(lines[0]) if lines else 0, d.severity, where + message))
    return found


def _fix(d: Diagnostic) -> tuple[str, str] | None:
    """The did-you-mean a diagnostic carries as data (words.DidYouMean), if any."""
    return (d.hint.written, d.hint.meant) if isinstance(d.hint, DidYouMean) else None


def _same_file(a: str, b: str) -> bool:
    return a == b or os.path.abspath(a) == os.path.abspath(b)


def token_end(text: str, start: int) -> int:
    """Where the key or value starting at `start` ends: an expression `${...}`, a quoted
    string, or a plain scalar (up to `,` `]` `}` `#` or `: `)."""
    rest = text[start:]
    if rest.startswith("${"):
        close = rest.find("}")
        return start + (close + 1 if close >= 0 else len(rest))
    if rest[:1] in ("'", '"'):
        close = rest.find(rest[0], 1)
        return start + (close + 1 if close >= 0 else len(rest))
    match = re.match(r"[^,\]}#]*?(?=: |:$|[,\]}#]|\s*$)", rest)
    end = start + (len(match.group(0).rstrip()) if match else len(rest.rstrip()))
    return max(end, start + 1) if start < len(text) else start


# -- where the cursor is -----------------------------------------------------------------------------
def _at(doc: Document, line: int, character: int) -> tuple[tuple, bool] | None:
    """The document path of the key or value under a 0-based position, and whether it is a key."""
    best = None
    for table, is_key in ((doc.locs, False), (doc.key_locs, True)):
        for path, loc in table.items():
            if loc.file != doc.file or loc.line - 1 != line or loc.col - 1 > character:
                continue
            if best is None or loc.col > best[0].col or (loc.col == best[0].col and is_key):
                best = (loc, path, is_key)
    return (best[1], best[2]) if best else None


def _node_lists(data: Any) -> list[tuple]:
    """Paths of every list of graph nodes: the graph, each block's graph, inline groups."""
    found = []

    def visit_list(path: tuple, items: Any) -> None:
        if not isinstance(items, list):
            return
        found.append(path)
        for i, item in enumerate(items):
            if isinstance(item, dict) and isinstance(item.get("graph"), list):
                visit_list(path + (i, "graph"), item["graph"])

    if isinstance(data, dict):
        visit_list(("graph",), data.get("graph"))
        for name, block in (data.get("blocks") or {}).items() if isinstance(data.get("blocks"), dict) else ():
            if isinstance(block, dict):
                visit_list(("blocks", name, "graph"), block.get("graph"))
        visit_list(("objectives",), data.get("objectives"))
    return found


def _item_at(doc: Document, lines: list[str], line: int) -> tuple | None:
    """The innermost node item (its document path) whose text holds the 0-based `line`."""
    best = None
    for list_path in _node_lists(doc.data):
        for i in range(len(value_at(doc.data, list_path))):
            loc = doc.locs.get(list_path + (i,))
            if loc is None or loc.file != doc.file or loc.line - 1 > line:
                continue
            if _holds(lines, loc, line) and (best is None or loc.line > best[1].line or
                                             (loc.line == best[1].line and loc.col > best[1].col)):
                best = (list_path + (i,), loc)
    return best[0] if best else None


def _holds(lines: list[str], loc: Loc, line: int) -> bool:
    """Whether the YAML item starting at `loc` runs on to `line` (by indentation)."""
    indent = loc.col - 1
    for text in lines[loc.line:line + 1]:
        stripped = text.strip()
        if stripped and not stripped.startswith("#") and len(text) - len(text.lstrip()) < indent:
            return False
    return True


def _op_of(item: Any) -> str | None:
    return next((k for k in item if k not in META_KEYS), None) if isinstance(item, dict) else None


def _names(data: Any, list_path: tuple) -> list[str | None]:
    """The names of the nodes listed at `list_path`, as expansion gives them."""
    items = value_at(data, list_path)
    return node_names(items if isinstance(items, list) else [], taken_names(data, list_path))


# -- hover -------------------------------------------------------------------------------------------
def graph_of(analysis: Analysis) -> Graph | None:
    """The IR the check made, or when the spec failed before making one, the IR of the nodes that
    expand past its errors, typed and costed as far as the rules pass (made once per text)."""
    if analysis.attempt.graph is not None or analysis.own is None:
        return analysis.attempt.graph
    if not analysis.tried_partial:
        analysis.tried_partial = True
        try:
            analysis.partial = expand_partial(compose(analysis.own))
            if analysis.partial is not None:
                try:
                    infer(analysis.partial)
                except SpecError:
                    pass  # the nodes that failed stay untyped; the others are typed
                PartialCosting(analysis.partial).run()
        except Exception:  # noqa: BLE001 - a best effort for hover; the diagnostics say what is wrong
            analysis.partial = None
    return analysis.partial


def hover(analysis: Analysis, line: int, character: int) -> str | None:
    """Markdown for the node item under the cursor: what the IR nodes it became compute; for a
    param under the cursor, its value."""
    doc = analysis.own
    if doc is None:
        return None
    param = _param_at(analysis, line, character)
    if param is not None:
        return _param_hover(analysis, *param)
    graph = graph_of(analysis)
    if graph is None:
        return None
    item = _item_at(doc, analysis.text.splitlines(), line)
    if item is None:
        return None
    names = _matching_nodes(graph, doc.data, item)
    raw = value_at(doc.data, item)
    op = _op_of(raw)
    title = _names(doc.data, item[:-1])[item[-1]] or op
    if not names:
        if graph is analysis.partial and op is not None:
            return f"**{title}** \u00b7 `{op}` \u00b7 not checked: it has an error, or reads a node that has one"
        return None
    if op in _primitive_names():
        return _node_hover(graph, title, names, analysis.attempt.error)
    return _group_hover(graph, title, op, names, analysis.attempt.error)


PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _param_at(analysis: Analysis, line: int, character: int) -> tuple[str, tuple] | None:
    """(name, document path of its declaration) of the param under the cursor: a key under
    `params` (the spec's or a block's), or a name read inside `${...}` that is a block parameter
    (in that block), a param or a dim."""
    doc = analysis.own
    at = _at(doc, line, character)
    if at is not None and at[1] and len(at[0]) >= 2 and at[0][-2] == "params":
        return at[0][-1], at[0]
    lines = analysis.text.splitlines()
    word = _word_in_expression(lines[line] if line < len(lines) else "", character)
    if word is None:
        return None
    composed = analysis.attempt.document or doc
    path = at[0] if at is not None else ()
    item = _item_at(doc, lines, line)
    block = path[1] if path[:1] == ("blocks",) and len(path) > 1 else (
        item[1] if item is not None and item[0] == "blocks" else None)
    if block is not None and isinstance(value_at(composed.data, ("blocks", block, "params")), dict) \
            and word in value_at(composed.data, ("blocks", block, "params")):
        return word, ("blocks", block, "params", word)
    for section in ("params", "dims"):
        if isinstance(value_at(composed.data, (section,)), dict) and word in value_at(composed.data, (section,)):
            return word, (section, word)
    return None


def _word_in_expression(text: str, character: int) -> str | None:
    """The name under `character` when it lies inside a `${...}` of the line."""
    for match in PLACEHOLDER.finditer(text):
        if match.start(1) <= character <= match.end(1):
            for word in WORD.finditer(match.group(1)):
                if match.start(1) + word.start() <= character <= match.start(1) + word.end():
                    return word.group()
    return None


def _param_hover(analysis: Analysis, name: str, path: tuple) -> str:
    composed = analysis.attempt.document or analysis.own
    graph = graph_of(analysis)
    what = {"params": "param", "dims": "dim"}.get(path[0], f"parameter of block `{path[1]}`")
    lines = [f"**{name}** \u00b7 {what}"]
    if path[0] == "params" and graph is not None and name in (graph.params or {}):
        lines.append(f"value `{graph.params[name]!r}`")
    else:
        raw = value_at(composed.data, path)
        lines.append("required (no default)" if raw is None and path[0] == "blocks" else f"written `{raw!r}`")
    declared = value_at(composed.data, ("param_types", name)) if path[0] == "params" else None
    if isinstance(declared, dict):
        lines.append(", ".join(f"{k}: {v}" for k, v in declared.items() if k in ("type", "choices")))
    return "\n\n".join(lines)


def _primitive_names() -> set[str]:
    from ..primitives import registry

    return set(registry.primitives())


def _pattern(data: Any, item: tuple) -> tuple[str | None, str]:
    """(the block whose definition holds the item, or None; a regex of the item's IR path
    relative to the top or to a use of that block)."""
    block = item[1] if item[0] == "blocks" else None
    start = 3 if block else 1  # ("blocks", B, "graph", i, ...) or ("graph", i, ...)
    segments = []
    path = item[:start]
    rest = item[start:]
    while rest:
        index, rest = rest[0], rest[1:]
        names = _names(data, path)
        segments.append(re.escape(names[index] or "?"))
        path = path + (index,)
        if rest:  # into an inline group: ("graph", j)
            path, rest = path + (rest[0],), rest[1:]
    return block, r"(?:\.\d+)?\.".join(segments) + r"(?:\.\d+)?"


def _matching_nodes(graph: Graph, data: Any, item: tuple) -> list[str]:
    """The IR nodes the item became: itself and its copies, or every node inside it."""
    block, rel = _pattern(data, item)
    raw = value_at(data, item)
    op = _op_of(raw)
    if block is None:
        prefixes = [""]
    else:
        prefixes = [p + "." for p, g in graph.groups.items() if g.kind == "block" and g.block == block]
    found = []
    inside = op not in _primitive_names()
    for node in graph.nodes():
        if node.is_input:
            continue
        for prefix in prefixes:
            if node.name.startswith(prefix) and re.fullmatch(rel + (r"\..+" if inside else ""),
                                                            node.name[len(prefix):]):
                found.append(node.name)
                break
    return found


def _node_hover(graph: Graph, title: str, names: list[str], error: SpecError | None) -> str:
    node = graph.node(names[0])
    ops = list(dict.fromkeys(graph.node(n).op.label for n in names))
    lines = [f"**{title}** \u00b7 `{' | '.join(ops)}`" + (f" \u00b7 {len(names)} nodes" if len(names) > 1 else "")]
    if len(names) == 1:
        lines += _one_node(graph, node.name, error)
        return "\n\n".join(lines)
    lines.append(_table(graph, names, error))
    return "\n\n".join(lines)


def _one_node(graph: Graph, name: str, error: SpecError | None) -> list[str]:
    node = graph.node(name)
    out = [f"`{name}`"]
    failed = _errors_at(name, error)
    if failed:
        return out + [f"error: {d.message}" for d in failed]
    if node.type is None:
        return out + ["not checked: what it reads failed"]
    grid = f" \u00b7 grid {node.type.grid[0]}x{node.type.grid[1]}" if node.type.grid else ""
    prefix = f" (+{node.type.prefix} class token{'s' if node.type.prefix > 1 else ''})" if node.type.prefix else ""
    out.append(f"output `{_shape(node)}`{grid}{prefix}")
    cost = node.meta.get("cost")
    if cost is not None:
        out.append(f"params {cost.params:,} \u00b7 FLOPs {human(cost.flops).strip()} (per sample)")
    return out


def _shape(node) -> str:
    return "[" + ", ".join(str(d) for d in node.type.shape) + "]"


def _errors_at(name: str, error: SpecError | None) -> list[Diagnostic]:
    return [d for d in (error.diagnostics if error else []) if d.path == name]


def _table(graph: Graph, names: list[str], error: SpecError | None) -> str:
    rows = ["| node | output | params | FLOPs |", "|---|---|---:|---:|"]
    for name in names[:MOST_ROWS]:
        node = graph.node(name)
        cost = node.meta.get("cost")
        failed = _errors_at(name, error)
        shape = "error" if failed else (node.type.describe() if node.type else "not checked")
        rows.append(f"| `{name}` | `{shape}` | {f'{cost.params:,}' if cost else ''} | "
                    f"{human(cost.flops).strip() if cost else ''} |")
    if len(names) > MOST_ROWS:
        rows.append(f"| ... {len(names) - MOST_ROWS} more | | | |")
    params, flops = _totals(graph, names)
    rows.append(f"| **total** | | **{params:,}** | **{human(flops).strip()}** |")
    return "\n".join(rows)


def _totals(graph: Graph, names: list[str]) -> tuple[int, int]:
    costs = [graph.node(n).meta.get("cost") for n in names]
    return sum(c.params for c in costs if c), sum(c.flops for c in costs if c)


def _group_hover(graph: Graph, title: str, op: str | None, names: list[str], error: SpecError | None) -> str:
    what = "inline group" if op == "graph" else f"block `{op}`"
    params, flops = _totals(graph, names)
    last = graph.node(names[-1])
    lines = [f"**{title}** \u00b7 {what} \u00b7 {len(names)} nodes",
             f"params {params:,} \u00b7 FLOPs {human(flops).strip()} (per sample, all copies)"]
    if last.type is not None:
        lines.append(f"output `{last.type.describe()}` (`{last.name}`)")
    failed = [d for n in names for d in _errors_at(n, error)]
    lines += [f"error at `{d.path}`: {d.message}" for d in failed]
    return "\n\n".join(lines)


# -- definition --------------------------------------------------------------------------------------
def definition(analysis: Analysis, line: int, character: int) -> Place | None:
    doc = analysis.own
    if doc is None:
        return None
    composed = analysis.attempt.document or doc
    param = _param_at(analysis, line, character)
    if param is not None:
        return _place(doc.key_locs.get(param[1]) or composed.key_locs.get(param[1]))
    at = _at(doc, line, character)
    if at is None:
        return None
    path, is_key = at
    if is_key:
        return _block_definition(composed, doc, path)
    if path == ("extends",):
        return _extended_file(doc)
    if path[:1] == ("outputs",):
        text = value_at(doc.data, path)
        return _resolve(composed, doc, ("graph", 0), text) if isinstance(text, str) else None
    key_index = next((i for i in range(len(path) - 1, -1, -1) if path[i] in REFERENCE_KEYS), None)
    if key_index is None:
        return None
    text = value_at(doc.data, path)
    if not isinstance(text, str):
        return None
    item = path[:key_index]
    if path[key_index] == "tie":
        item = item[:-1]  # `tie` sits under the op's mapping: the item is one level up
    return _resolve(composed, doc, item, text)


def _block_definition(composed: Document, doc: Document, path: tuple) -> Place | None:
    name = path[-1]
    blocks = composed.data.get("blocks") if isinstance(composed.data, dict) else None
    if not isinstance(blocks, dict) or name not in blocks or len(path) < 2 or not isinstance(path[-2], int):
        return None
    return _place(composed.key_locs.get(("blocks", name)))


def _extended_file(doc: Document) -> Place | None:
    target = value_at(doc.data, ("extends",))
    if not isinstance(target, str):
        return None
    try:  # only a file the spec may name (paths.py): go-to-definition never opens /proc or a dotfile
        full = named_file(target, doc.file, doc.file, None, "extends")
    except SpecError:
        return None
    return Place(full, 0, 0) if os.path.isfile(full) else None


def _resolve(composed: Document, doc: Document, item: tuple, text: str) -> Place | None:
    """Where the node a reference names is written: looked up as expansion does, in the file
    alone first and then in the spec composed with its bases."""
    for source in (doc, composed):
        place = _lookup(source, item, text.strip())
        if place is not None:
            return place
    return None


def _lookup(doc: Document, item: tuple, text: str) -> Place | None:
    first, *rest = text.split(".")
    data = doc.data
    scope = item[:-1]  # the list that holds the item
    while scope:
        if isinstance(value_at(data, scope), list):
            names = _names(data, scope)
            if first in names:
                return _descend(doc, scope + (names.index(first),), [s for s in rest if not s.isdigit()])
        if scope[0] == "blocks" and len(scope) == 3:  # a block's own inputs, then nothing outside it
            inputs = value_at(data, scope[:2] + ("inputs",)) or ["x"]
            if first in inputs and isinstance(value_at(data, scope[:2] + ("inputs",)), list):
                return _place(doc.locs.get(scope[:2] + ("inputs", inputs.index(first))))
            return None
        scope = scope[:-2] if len(scope) >= 2 and isinstance(scope[-2], int) else ()
    inputs = value_at(data, ("inputs",))
    if isinstance(inputs, dict) and first in inputs and not rest:
        return _place(doc.key_locs.get(("inputs", first)))
    return None


def _descend(doc: Document, item: tuple, rest: list[str]) -> Place | None:
    """From a node item, down through inline groups and block uses by the path's segments."""
    for segment in rest:
        raw = value_at(doc.data, item)
        op = _op_of(raw)
        if op == "graph":
            items_path = item + ("graph",)
        elif isinstance(value_at(doc.data, ("blocks", op)), dict):
            items_path = ("blocks", op, "graph")
        else:
            return None
        names = _names(doc.data, items_path)
        if segment not in names:
            return None
        item = items_path + (names.index(segment),)
    return _place(doc.locs.get(item))


def _place(loc: Loc | None) -> Place | None:
    if loc is None:
        return None
    return Place(os.path.abspath(loc.file), loc.line - 1, loc.col - 1)
