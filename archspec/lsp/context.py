"""Where the cursor is in a spec's text, read from the text alone: the keys of the mappings
around it, whether it is at a key or a value, and the word typed so far.

Completion asks while a line is half typed, when the document is not valid YAML, so this
never parses the document: it reads the cursor's line (its block keys and any `{...}` or
`[...]` flow on it up to the cursor) and, for the block keys around that line, the lines above
it by indentation. It never raises on any text.

    graph:
      - attention:
          kind: wi|            -> keys ("graph", "-", "attention", "kind"), a value, word "wi"
      - mlp: {ratio: 2, ac|    -> keys ("graph", "-", "mlp"), a key, word "ac"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ITEM = "-"  # a list item, in `keys`
WORD_BEFORE = re.compile(r"[A-Za-z0-9_.\-]*$")
BLOCK_KEY = re.compile(r"""([^\s:#{}\[\],'"][^:#{}\[\],]*?|"[^"]*"|'[^']*')[ \t]*:(?=\s|$)""")
DASHES = re.compile(r"(?:-(?:[ \t]+|$))+")


@dataclass(frozen=True)
class Cursor:
    """The cursor's place: the keys around it (outermost first, ITEM for a list item), whether
    it is where a key goes (else a value), the word typed so far and where it starts, and the
    text of the `${...}` expression it is in (None: in none)."""

    keys: tuple[str, ...]
    at_key: bool
    word: str
    start: int  # character where `word` starts
    expression: str | None = None


def cursor_at(text: str, line: int, character: int) -> Cursor | None:
    """The cursor's place at a 0-based position; None where nothing can be completed (a
    comment, a quoted string, past the end of the text)."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        return None
    prefix = lines[line][:max(character, 0)]
    word = WORD_BEFORE.search(prefix).group(0)
    start = len(prefix) - len(word)
    indent = len(prefix) - len(prefix.lstrip(" "))
    dashes = DASHES.match(prefix, indent)
    if dashes:
        content = dashes.end()
        items = dashes.group(0).count("-")
        outer = _parents(lines, line, indent, True) + [ITEM] * items
    else:
        content = indent
        outer = _parents(lines, line, indent, False)
    expression = _open_expression(prefix)
    if expression is not None:  # the keys of the line's block around it (enough to tell a block's)
        name = re.search(r"[A-Za-z_]\w*$", prefix)
        typed = name.group(0) if name else ""
        return Cursor(tuple(outer), False, typed, len(prefix) - len(typed), expression)
    flow = _flow(prefix[content:])
    if flow is None:
        return None
    keys, at_key = flow
    return Cursor(tuple(outer + keys), at_key, word, start)


def _open_expression(prefix: str) -> str | None:
    """The text of a `${...}` left open before the cursor, else None."""
    opened = prefix.rfind("${")
    if opened < 0 or "}" in prefix[opened:]:
        return None
    return prefix[opened + 2:]


def _shape(text: str) -> tuple[int, int, str | None] | None:
    """(indent, where the content starts after any dashes, the line's first key) of a line
    that holds something; None for a blank or comment line."""
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    indent = len(text) - len(text.lstrip(" "))
    dashes = DASHES.match(text, indent)
    content = dashes.end() if dashes else indent
    key = BLOCK_KEY.match(text, content)
    return indent, content if dashes else -1, _unquoted(key.group(1)) if key else None


def _parents(lines: list[str], line: int, column: int, item: bool) -> list[str]:
    """The block keys around a line whose content (a key when `item` is false, a list item's
    dash when true) starts at `column`, outermost first."""
    keys: list[str] = []
    for number in range(line - 1, -1, -1):
        shape = _shape(lines[number])
        if shape is None:
            continue
        indent, content, key = shape
        if item:
            parent = key is not None and content < 0 and indent <= column or key is not None and indent < column
        else:
            parent = indent < column and key is not None
            if indent < column and content == column:  # the first line of the same list item
                keys.append(ITEM)
                column, item = indent, True
                continue
        if not parent:
            continue
        keys.append(key)
        if content >= 0:
            keys.append(ITEM)
            column, item = indent, True
        else:
            column, item = indent, False
    return list(reversed(keys))


def _unquoted(key: str) -> str:
    key = key.strip()
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"" else key


def _flow(text: str) -> tuple[list[str], bool] | None:
    """The keys opened on one line's content up to the cursor, and whether the cursor is at a
    key; None inside a comment or a quoted string."""
    keys: list[str] = []
    containers: list[tuple[str, int]] = []  # "{" or "[", and len(keys) when it opened
    at_key, token, i = True, "", 0
    while i < len(text):
        char = text[i]
        if char in "'\"":
            close = text.find(char, i + 1)
            if close < 0:
                return None
            token += text[i:close + 1]
            i = close + 1
            continue
        if char == "#" and (i == 0 or text[i - 1] in " \t"):
            return None
        if char == "$" and text.startswith("${", i):
            close = text.find("}", i)
            if close < 0:
                return None
            token += text[i:close + 1]
            i = close + 1
            continue
        if char == ":" and at_key and (i + 1 == len(text) or text[i + 1] in " \t"):
            keys.append(_unquoted(token))
            at_key, token = False, ""
        elif char in "{[" and not at_key or char in "{[" and not token.strip():
            containers.append((char, len(keys)))
            if char == "[":
                keys.append(ITEM)
            at_key, token = char == "{", ""
        elif char == "," and containers:
            opener, depth = containers[-1]
            del keys[depth + (opener == "["):]
            at_key, token = opener == "{", ""
        elif char in "}]" and containers:
            _, depth = containers.pop()
            del keys[depth:]
            at_key, token = False, char  # after a closed container: nothing to complete
        else:
            token += char
        i += 1
    if not at_key and token.strip() and not WORD_BEFORE.fullmatch(token.strip()):
        return None
    return keys, at_key
