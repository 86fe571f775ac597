"""Safe YAML loading with a source position for every key and value.

We let PyYAML parse and compose the node tree, then build plain Python values ourselves:
- no tag may construct an object: only plain scalars, quoted strings, lists and mappings;
- plain scalars follow the YAML 1.2 core schema (`1e-6` is a float, `yes` is a string);
- duplicate keys and merge keys (`<<`) are errors;
- the text size and the size after alias expansion are bounded, so a "billion laughs"
  document is refused before anything is expanded;
- numbers no network has are refused where they are written: infinite or NaN floats (a
  literal such as 1e400 overflows to infinity), integers beyond 2^63 (checked before Python
  converts them: a number of thousands of digits is refused, not slow);
- a file is read only when it is a regular file: a FIFO, a socket or a device is refused
  without reading (opened non-blocking, so it cannot hang); a file whose path is not UTF-8 is
  refused by name (the path goes into UTF-8 artifacts and messages).

Limits: limits.py.

Positions are kept in side tables keyed by the value's path (a tuple of keys and indices), so
later stages can point at the exact key or value that is wrong.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from ..core.errors import Loc, SpecError, error
from ..core.files import SpecialFile, read_regular_file
from .limits import MAX_DEPTH, MAX_INT, MAX_TEXT_BYTES, MAX_VALUES

_PLAIN = "tag:archspec:plain"  # our marker for an untagged plain scalar
_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Composes nodes only; marks plain scalars so we resolve them by the 1.2 core schema."""

    def resolve(self, kind, value, implicit):  # noqa: D102 - PyYAML hook
        if kind is ScalarNode and implicit[0]:
            return _PLAIN
        return super().resolve(kind, value, implicit)


_INT = re.compile(r"[-+]?[0-9]+\Z")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")


def resolve_plain(text: str) -> Any:
    """A plain (unquoted) scalar: null, bool, int, float, else a string."""
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _INT.match(text):
        return _integer(text)
    if _FLOAT.match(text):
        value = float(text)
        if math.isinf(value):
            raise _BadNumber(f"'{_short(text)}' is too large: it overflows to infinity; a spec's values are finite",
                             "a float is at most about 1.8e308; check the exponent")
        return value
    if text.lower() in _NOT_FINITE:
        raise _BadNumber(f"'{text}' is not a finite number; a spec's values are finite")
    return text


_NOT_FINITE = (".inf", "+.inf", "-.inf", ".nan")
_INT_DIGITS = len(str(MAX_INT))


class _BadNumber(ValueError):
    """A number no network has: infinite, NaN, or an integer beyond MAX_INT."""

    def __init__(self, message: str, hint: str = "give a number, or quote it if it is meant as text"):
        super().__init__(message)
        self.hint = hint


def _integer(text: str) -> int:
    """A plain integer, refused beyond MAX_INT before Python converts it (a number of a million
    digits would take long, and one of more than 4,300 digits is refused by Python itself)."""
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > _INT_DIGITS or abs(int(text)) > MAX_INT:
        raise _BadNumber(f"integer '{_short(text)}' is too large: a spec's integers lie within +-2^63",
                         "no size or count of a network is this large; check the number")
    return int(text)


def _short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else f"{text[:limit - 4]}... ({len(text)} characters)"


@dataclass
class Document:
    """Plain values plus where each came from."""

    file: str
    data: Any
    locs: dict[tuple, Loc] = field(default_factory=dict)  # value positions
    key_locs: dict[tuple, Loc] = field(default_factory=dict)  # mapping-key positions
    quoted: set[tuple] = field(default_factory=set)  # paths of quoted scalars
    sources: dict[str, str] = field(default_factory=dict)  # file -> text, for quoting lines in errors
    replaced: dict[str, Any] = field(default_factory=dict)  # params --set replaced -> the spec's own values

    def loc(self, path: tuple, key: bool = False) -> Loc | None:
        """Position of the value (or its key) at `path`, else of the nearest enclosing value."""
        path = tuple(path)
        if key and path in self.key_locs:
            return self.key_locs[path]
        while True:
            if path in self.locs:
                return self.locs[path]
            if not path:
                return None
            path = path[:-1]

    def drop_positions(self, prefix: tuple) -> None:
        """Forget where the value at `prefix`, and everything inside it, was written."""
        n = len(prefix)
        self.drop_positions_where(lambda path: path[:n] == prefix)

    def drop_positions_of(self, path: tuple, value: Any) -> None:
        """Forget where `value`, at `path`, and everything inside it were written: found by walking
        the value, so it takes time in proportion to the value, not to the whole document."""
        stack = [(path, value)]
        while stack:
            path, value = stack.pop()
            self.locs.pop(path, None)
            self.key_locs.pop(path, None)
            self.quoted.discard(path)
            if isinstance(value, dict):
                stack.extend((path + (key,), item) for key, item in value.items())
            elif isinstance(value, list):
                stack.extend((path + (i,), item) for i, item in enumerate(value))

    def drop_positions_where(self, inside: Callable[[tuple], bool]) -> None:
        """Forget where the values at the paths `inside` accepts were written."""
        for table in (self.locs, self.key_locs):
            for path in [p for p in table if inside(p)]:
                del table[path]
        self.quoted = {p for p in self.quoted if not inside(p)}


def _mark_loc(file: str, mark) -> Loc:
    return Loc(file, mark.line + 1, mark.column + 1)


def _expanded_size(node, memo: dict[int, int], depth: int, file: str) -> int:
    """Number of values `node` becomes once aliases are expanded (memoised per node)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if depth > MAX_DEPTH:
        raise error(f"nesting deeper than {MAX_DEPTH} levels", _mark_loc(file, node.start_mark))
    memo[key] = 0  # a node reached again while being sized is a recursive alias
    if isinstance(node, ScalarNode):
        size = 1
    elif isinstance(node, SequenceNode):
        size = 1 + sum(_expanded_size(c, memo, depth + 1, file) for c in node.value)
    else:
        size = 1 + sum(
            _expanded_size(k, memo, depth + 1, file) + _expanded_size(v, memo, depth + 1, file)
            for k, v in node.value
        )
    memo[key] = min(size, MAX_VALUES + 1)
    return memo[key]


def _too_big(node, memo: dict[int, int]):
    """The innermost node that alone expands to more than MAX_VALUES (where to point)."""
    while not isinstance(node, ScalarNode):
        children = node.value if isinstance(node, SequenceNode) else [c for kv in node.value for c in kv]
        big = next((c for c in children if memo.get(id(c), 0) > MAX_VALUES), None)
        if big is None:
            break
        node = big
    return node


class _Builder:
    def __init__(self, file: str):
        self.doc = Document(file, None)
        self.file = file

    def loc(self, node) -> Loc:
        return _mark_loc(self.file, node.start_mark)

    def build(self, node, path: tuple) -> Any:
        if len(path) > MAX_DEPTH:  # only a recursive alias gets here; the depth check caught the rest
            raise error("an alias refers to the list or mapping that contains it", self.loc(node))
        self.doc.locs[path] = self.loc(node)
        if isinstance(node, ScalarNode):
            if node.tag == _PLAIN:
                try:
                    return resolve_plain(node.value)
                except _BadNumber as exc:
                    raise error(str(exc), self.loc(node), hint=exc.hint) from None
            if node.tag == _STR:
                self.doc.quoted.add(path)
                return node.value
            raise self.tag_error(node)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                raise self.tag_error(node)
            return [self.build(child, path + (i,)) for i, child in enumerate(node.value)]
        if node.tag != _MAP:
            raise self.tag_error(node)
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.key(key_node)
            if key in result:
                first = self.doc.key_locs[path + (key,)]
                raise error(
                    f"duplicate key '{key}' (first given at line {first.line})",
                    self.loc(key_node),
                    hint="each key may appear once in a mapping; remove or rename one",
                )
            self.doc.key_locs[path + (key,)] = self.loc(key_node)
            result[key] = self.build(value_node, path + (key,))
        return result

    def key(self, node) -> str:
        if not isinstance(node, ScalarNode):
            raise error("a mapping key must be a plain name, not a list or mapping", self.loc(node))
        if node.tag == "tag:yaml.org,2002:merge" or (node.tag == _PLAIN and node.value == "<<"):
            raise error(
                "YAML merge keys (<<) are not supported",
                self.loc(node),
                hint="share structure with `blocks`, `params` or `extends` instead",
            )
        if node.tag not in (_PLAIN, _STR):
            raise self.tag_error(node)
        return node.value

    def tag_error(self, node):
        tag = node.tag
        if tag.startswith("tag:yaml.org,2002:"):
            tag = "!!" + tag[len("tag:yaml.org,2002:"):]
        return error(
            f"YAML tag '{tag}' is not allowed",
            self.loc(node),
            hint="a spec holds plain values only: numbers, strings, booleans, lists and mappings",
        )


def _check_depth(text: str, file: str) -> None:
    """Refuse deep nesting from the event stream, before the (recursive) composer sees it."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise error(f"nesting deeper than {MAX_DEPTH} levels", _mark_loc(file, event.start_mark))
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def _syntax_error(exc: yaml.MarkedYAMLError, file: str, text: str):
    mark = exc.problem_mark or exc.context_mark
    loc = _mark_loc(file, mark) if mark else Loc(file, 1, 1)
    problem = exc.problem or exc.context or "invalid YAML"
    hint = None
    if "another document" in problem:
        hint = "a spec is one YAML document: remove the second '---'"
    lines = text.splitlines()
    if lines and loc.line > len(lines):  # the end of the text: point after its last character
        loc = Loc(file, len(lines), len(lines[-1]) + 1)
    line = lines[loc.line - 1] if 0 < loc.line <= len(lines) else ""
    start = line.rfind("${", 0, loc.col)  # the expression the parser stumbled on, if any
    if start < 0:
        start = line.find("${")
    if start > 0 and line[start - 1] in "\"'":
        start = -1  # a quoted expression is fine; the problem is elsewhere
    if start >= 0 and ("[" in line[:start] or "{" in line[:start]):
        loc = Loc(file, loc.line, start + 1)
        problem = "an unquoted ${...} inside [...] or {...}"
        hint = 'inside [...] or {...} an expression must be quoted: "${...}"'
    elif start >= 0 and "mapping values" in problem and "}" not in line[start:loc.col - 1]:
        loc = Loc(file, loc.line, start + 1)
        problem = "an unquoted ${...} that holds ': '"
        hint = 'quote the value ("${...}"): YAML reads ": " as the start of a mapping'
    elif "\t" in line[: max(loc.col, 1)]:
        col = line.index("\t") + 1
        loc = Loc(file, loc.line, col)
        problem = "a tab character where YAML expects spaces"
        hint = "YAML indentation must use spaces, not tabs"
    elif "mapping values" in problem:  # the Gemma 2 trial's `doc: ... (norm_offset 1.0 in the spec: no ...)`
        hint = 'a value that holds ": " needs quotes ("..."), or a block scalar (`doc: >` and the text below it)'
    return error(f"YAML syntax: {problem}", loc, hint=hint)


def load_text(text: str, file: str = "<string>") -> Document:
    """Parse one YAML document into plain values with positions."""
    try:
        doc = _load_text(text, file)
    except SpecError as exc:
        raise exc.with_sources({file: text}) from None
    doc.sources[file] = text
    return doc


def _check_encodable(text: str, file: str) -> None:
    """A str may hold lone surrogates (from a file decoded with `surrogateescape`, or built in
    Python); they are no characters, and the YAML parser cannot read them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        col = exc.start - (text.rfind("\n", 0, exc.start) + 1) + 1
        raise error(f"the text holds {text[exc.start]!r}, a lone surrogate, which is no character",
                    Loc(file, line, col), hint="a spec is UTF-8 text; remove the character") from None


def _load_text(text: str, file: str) -> Document:
    _check_encodable(text, file)
    if len(text.encode("utf-8", "replace")) > MAX_TEXT_BYTES:
        raise error(f"file is larger than {MAX_TEXT_BYTES // 1024} KiB; a spec should be a short text", Loc(file, 1, 1))
    try:
        _check_depth(text, file)
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, file, text) from None
    except yaml.YAMLError as exc:  # unmarked errors: rare, still the user's text
        raise error(f"YAML syntax: {exc}", Loc(file, 1, 1)) from None
    except RecursionError:
        raise error(f"nesting deeper than {MAX_DEPTH} levels", Loc(file, 1, 1)) from None
    if root is None:
        raise error("the spec is empty", Loc(file, 1, 1), hint="start with `name:` and `graph:`")
    memo: dict[int, int] = {}
    if _expanded_size(root, memo, 0, file) > MAX_VALUES:
        raise error(
            f"this value expands to more than {MAX_VALUES:,} values (keys and values, aliases expanded where "
            "used: archspec's limit)",
            _mark_loc(file, _too_big(root, memo).start_mark),
            hint="a spec stays small: repeat structure with `blocks` and `repeat`; anchors and aliases (&a / *a) "
                 "are expanded where they are used",
        )
    _refuse_config_comment(text, file)
    builder = _Builder(file)
    builder.doc.data = builder.build(root, ())
    return builder.doc


CONFIG_COMMENT = re.compile(r"^[ \t]*#[ \t]*pretrained_cfg[ \t]*:", re.M)


def _refuse_config_comment(text: str, file: str) -> None:
    """A `# pretrained_cfg:` comment line, the form archspec read before it was a key, is refused
    rather than ignored: a model built without its data config normalises with timm's defaults."""
    found = CONFIG_COMMENT.search(text)
    if found:
        line = text.count("\n", 0, found.start()) + 1
        raise error("a `# pretrained_cfg:` comment is not read (archspec reads no comments)", Loc(file, line, 1),
                    hint="write it as the top-level key: drop the `# ` (pretrained_cfg: {mean: [...], std: [...], "
                         "interpolation: bicubic, crop_pct: 0.9})")


def _check_file_name(path: str) -> None:
    """A path that is not UTF-8 (bytes Python keeps as lone surrogates) is refused before reading:
    report.json, model.py and every message carry the spec's path, and they are UTF-8 text."""
    try:
        os.path.abspath(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(os.path.abspath(path)).decode("utf-8", "backslashreplace")
        raise error(f"the file name {shown} is not UTF-8 text", hint="rename the file (or the folder that holds it) "
                    "with a UTF-8 name: archspec writes a spec's path into report.json and model.py") from None


def load_file(path: str) -> Document:
    _check_file_name(path)
    try:
        raw = read_regular_file(path, MAX_TEXT_BYTES)
    except FileNotFoundError:
        raise error(f"no such file: {path}") from None
    except IsADirectoryError:
        raise error(f"{path} is a directory, not a spec file") from None
    except SpecialFile as exc:
        raise error(f"{path} is {exc}, not a spec file", hint="give the path of a YAML file") from None
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a path holding a NUL character
        raise error(f"cannot read {path!r}: {exc}") from None
    if len(raw) > MAX_TEXT_BYTES:
        raise error(f"file is larger than {MAX_TEXT_BYTES // 1024} KiB; a spec should be a short text", Loc(path, 1, 1))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error("the file is not UTF-8 text", Loc(path, line, 1)) from None
    return load_text(text, path)
