"""Hover on a param: at its key under `params:` or on its name inside a `${...}`, its value (as
the check evaluated it, after `extends` and overrides) and where this file uses it.

    **width** · param = 768
    `${base * 2}` in this file
    used at:
    - line 31: `encoder.attn` · dim
    - line 40: param `hidden`
"""

from __future__ import annotations

import re
from typing import Any

from .analysis import Analysis, _at, _names, _node_lists

MOST_USES = 12
EXPRESSION = re.compile(r"\$\{[^}]*\}?")
NAME = re.compile(r"[A-Za-z_]\w*")
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")  # string constants inside an expression


def param_hover(analysis: Analysis, line: int, character: int) -> str | None:
    """Markdown for the param under the cursor; None when the cursor is on no param."""
    doc = analysis.own
    if doc is None or not isinstance(doc.data, dict):
        return None
    name = _param_key_at(analysis, line, character) or _param_used_at(analysis, line, character)
    if name is None:
        return None
    composed = analysis.attempt.document or doc
    params = composed.data.get("params") if isinstance(composed.data, dict) else None
    if not isinstance(params, dict) or name not in params:
        return None
    return "\n\n".join([_value_line(analysis, name, params[name]), _uses(analysis, name)])


def _param_key_at(analysis: Analysis, line: int, character: int) -> str | None:
    at = _at(analysis.own, line, character)
    if at is None:
        return None
    path, is_key = at
    return path[1] if is_key and len(path) == 2 and path[0] == "params" else None


def _param_used_at(analysis: Analysis, line: int, character: int) -> str | None:
    """The name under the cursor inside a `${...}` on the line, when it is a spec param there
    (not a block's parameter of the same name, inside that block)."""
    lines = analysis.text.split("\n")
    if not 0 <= line < len(lines):
        return None
    text = lines[line]
    for expression in EXPRESSION.finditer(text):
        if not expression.start() <= character <= expression.end():
            continue
        quoted = [q.span() for q in QUOTED.finditer(text, expression.start(), expression.end())]
        for word in NAME.finditer(text, expression.start() + 2, expression.end()):
            if any(a < word.start() < b for a, b in quoted):
                continue
            if word.start() <= character <= word.end():
                return None if _shadowed(analysis, line, word.group(0)) else word.group(0)
    return None


def _shadowed(analysis: Analysis, line: int, name: str) -> bool:
    """Whether `line` is inside a block that has a parameter called `name`."""
    blocks = analysis.own.data.get("blocks")
    for block, body in (blocks or {}).items() if isinstance(blocks, dict) else ():
        start = analysis.own.key_locs.get(("blocks", block))
        params = body.get("params") if isinstance(body, dict) else None
        if start is None or not isinstance(params, dict) or name not in params or start.line - 1 > line:
            continue
        later = [loc.line - 1 for key, loc in analysis.own.key_locs.items()
                 if len(key) == 2 and key[0] == "blocks" and loc.line > start.line]
        top = [loc.line - 1 for key, loc in analysis.own.key_locs.items() if len(key) == 1 and loc.line > start.line]
        end = min(later + top, default=len(analysis.text.split("\n")))
        if line < end:
            return True
    return False


def _value_line(analysis: Analysis, name: str, raw: Any) -> str:
    graph = analysis.attempt.graph
    values = graph.params if graph is not None and isinstance(graph.params, dict) else {}
    head = f"**{name}** \u00b7 param"
    if name in values:
        head += f" = `{values[name]!r}`"
    elif isinstance(raw, str) and "${" in raw:
        head += " (not evaluated: the check stopped before it)"
    own = analysis.own.data.get("params") if isinstance(analysis.own.data, dict) else None
    where = "this file" if isinstance(own, dict) and name in own else "the spec this one extends"
    if isinstance(raw, str) and "${" in raw:
        return f"{head}\n\n`{raw}` (in {where})"
    return head if where == "this file" else f"{head}\n\nset in {where}"


def _uses(analysis: Analysis, name: str) -> str:
    found = []
    pattern = re.compile(r"(?<![\w.])" + re.escape(name) + r"(?!\w)")
    for path, text in _strings(analysis.own.data, ()):
        if any(pattern.search(QUOTED.sub("''", e.group(0)[2:])) for e in EXPRESSION.finditer(text)):
            loc = analysis.own.locs.get(path)
            found.append((loc.line if loc else 0, _where(analysis.own.data, path)))
    if not found:
        return "not used in this file"
    found.sort()
    rows = [f"- line {line}: {where}" for line, where in found[:MOST_USES]]
    if len(found) > MOST_USES:
        rows.append(f"- ... {len(found) - MOST_USES} more")
    return "used at:\n" + "\n".join(rows)


def _strings(data: Any, path: tuple):
    """(path, text) of every string value in the document's data."""
    if isinstance(data, str):
        yield path, data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, path + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, path + (index,))


def _where(data: Any, path: tuple) -> str:
    """A value's place in words: the node it belongs to and the key, or the param or key."""
    if path[:1] == ("params",) and len(path) >= 2:
        return f"param `{path[1]}`"
    lists = set(_node_lists(data))
    for cut in range(len(path) - 1, 0, -1):
        if isinstance(path[cut], int) and path[:cut] in lists:
            names = _names(data, path[:cut])
            node = ".".join(_node_title(data, path[:cut + 1], names[path[cut]]))
            rest = [str(p) for p in path[cut + 1:]]
            key = ".".join(rest[1:]) or (rest[0] if rest else "")
            return f"`{node}`" + (f" \u00b7 {key}" if key else "")
    return "`" + ".".join(str(p) for p in path) + "`"


def _node_title(data: Any, item: tuple, name: str | None) -> list[str]:
    """The node's name, with the names of the groups around it (and its block's name)."""
    titles = [name or "?"]
    path = item[:-1]
    while len(path) >= 3 and isinstance(path[-2], int) and path[-1] == "graph":
        outer = path[:-2]
        titles.insert(0, _names(data, outer)[path[-2]] or "?")
        path = outer
    if path[:1] == ("blocks",) and len(path) >= 2:
        titles.insert(0, f"block {path[1]}:")
        return [titles[0] + " " + ".".join(titles[1:])]
    return titles
