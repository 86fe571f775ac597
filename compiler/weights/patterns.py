"""Regular expressions from a mapping file, compiled with bounds and located errors, and
matched in linear time.

A mapping file is text someone else may have written, and its patterns run against every key
of a checkpoint. A backtracking matcher (Python's `re`) can take exponential time on a pattern
such as `^(a|a)*$` or `.*.*.*...`, and no check of the pattern's shape catches every such case.
So patterns are matched by RE2 (the `google-re2` binding), whose time is linear in the key's
length whatever the pattern: RE2's syntax is Python's without lookaround, backreferences,
atomic groups or possessive repeats, and with `$` meaning the end of the key.

A pattern is refused, at the place in the file where it is written, when it does not compile
(Python's parser first, for its positions; then RE2), when it is longer than MAX_PATTERN_CHARS,
or when RE2's program for it is larger than MAX_PROGRAM_SIZE (a counted repeat such as
`\\w{1000}` is that many copies). Replacement templates (`\\1`, `\\g<name>`) are checked against
the groups of the pattern they go with, and expanded as Python's `re` expands them.
"""

from __future__ import annotations

import functools
import re

import re2

from archspec.core.errors import Loc, error

MAX_PATTERN_CHARS = 300  # a tensor-name pattern is a line of text
MAX_PROGRAM_SIZE = 2000  # RE2 instructions; the shipped mapping files need fewer than 100
PATTERN_HINT = "patterns are Python regular expressions searched in each key; anchor them with ^ and $"
LINEAR_HINT = ("patterns are matched in linear time, which rules out lookahead and lookbehind, backreferences, "
               "atomic groups and possessive repeats; \\Z is written $")
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would log each refused pattern on stderr; the located error says it


class KeyPattern:
    """A mapping-file pattern, searched in linear time: the part of `re.Pattern` the rules use
    (search, subn, groups, groupindex, pattern)."""

    __slots__ = ("pattern", "_regexp", "groups", "groupindex")

    def __init__(self, text: str, regexp):
        self.pattern, self._regexp = text, regexp
        self.groups, self.groupindex = regexp.groups, dict(regexp.groupindex)

    def __repr__(self) -> str:
        return f"KeyPattern({self.pattern!r})"

    def __eq__(self, other) -> bool:  # as re.Pattern: the same text is the same pattern
        return isinstance(other, KeyPattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def search(self, key: str) -> "KeyMatch | None":
        """The first match in `key`, or None."""
        found = self._regexp.search(key)
        return None if found is None else KeyMatch(self, key, found)

    def subn(self, template: str, key: str, count: int = 1) -> tuple[str, int]:
        """`key` with its first match replaced by `template` expanded, and 1; or `key` and 0.
        (The rules replace the first match only: `count` must be 1.)"""
        if count != 1:
            raise ValueError("a mapping pattern replaces its first match only (count=1)")
        found = self.search(key)
        if found is None:
            return key, 0
        return key[: found.start()] + found.expand(template) + key[found.end():], 1


class KeyMatch:
    """One match of a KeyPattern: groups by number or name, their spans, templates expanded."""

    __slots__ = ("_pattern", "string", "_found")

    def __init__(self, pattern: KeyPattern, string: str, found):
        self._pattern, self.string, self._found = pattern, string, found

    def _index(self, group: int | str) -> int:
        return self._pattern.groupindex[group] if isinstance(group, str) else group

    def group(self, group: int | str = 0) -> str | None:
        return self._found.group(self._index(group))

    def start(self, group: int | str = 0) -> int:
        return self._found.start(self._index(group))

    def end(self, group: int | str = 0) -> int:
        return self._found.end(self._index(group))

    def expand(self, template: str) -> str:
        """`template` with each group reference replaced by that group's text ('' if it did not
        take part), as Python's `re.Match.expand` does."""
        pieces = _template_pieces(template, tuple(sorted(self._pattern.groupindex.items())))
        return "".join(piece if isinstance(piece, str) else (self.group(piece) or "") for piece in pieces)


def compile_pattern(text: str, loc: Loc | None, what: str = "pattern") -> KeyPattern:
    """`text` compiled for linear-time matching, or a located error saying what is wrong with it."""
    if len(text) > MAX_PATTERN_CHARS:
        raise error(f"{what} is {len(text)} characters long; at most {MAX_PATTERN_CHARS} are allowed", loc,
                    hint="a pattern names tensors: match a prefix or a part of a key, not a whole list of keys")
    try:
        re.compile(text)  # Python's parser: its messages give the position of a mistake
    except re.error as exc:
        raise error(f"{what} '{text}' is not a valid regular expression: {exc.msg} at position {exc.pos}", loc,
                    hint=PATTERN_HINT) from None
    try:
        regexp = re2.compile(text, _OPTIONS)
    except re2.error as exc:
        raise error(f"{what} '{text}' cannot be matched in linear time: {_message(exc)}", loc,
                    hint=LINEAR_HINT) from None
    if regexp.programsize > MAX_PROGRAM_SIZE:
        raise error(f"{what} '{text}' is too large for the matcher ({regexp.programsize} steps; "
                    f"at most {MAX_PROGRAM_SIZE})", loc,
                    hint="a counted repeat such as {1000} makes that many copies: match only the part you need")
    return KeyPattern(text, regexp)


def linear(text: str) -> KeyPattern | None:
    """`text`, built from checked parts (a fuse pattern with its parts put in), compiled for
    linear-time matching; None where RE2 refuses it."""
    try:
        return KeyPattern(text, re2.compile(text, _OPTIONS))
    except re2.error:
        return None


def _message(exc: Exception) -> str:
    """RE2's message (bytes in the binding) as text."""
    message = exc.args[0] if exc.args else str(exc)
    return message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)


def check_template(pattern: KeyPattern, template: str, loc: Loc | None, what: str = "replacement",
                   shown: str | None = None) -> str:
    """`template` if it only refers to groups `pattern` has, else a located error (quoting `shown`,
    the text as written, where the template is that text without its `${...}`)."""
    if len(template) > MAX_PATTERN_CHARS:
        raise error(f"{what} is {len(template)} characters long; at most {MAX_PATTERN_CHARS} are allowed", loc)
    try:  # Python's own template parser, against a pattern of the same groups that matches only ''
        _groups_only(pattern.groups, tuple(sorted(pattern.groupindex.items()))).sub(template, "")
    except (re.error, IndexError) as exc:
        groups = pattern.groups
        have = f"the pattern has {groups} group{'s' if groups != 1 else ''}" if groups else "the pattern has no groups"
        message = exc.msg if isinstance(exc, re.error) else str(exc)
        raise error(f"{what} '{shown or template}': {message}", loc,
                    hint=f"{have}; \\1 is the first group's text, \\g<name> a named group's, \\\\ a backslash") from None
    return template


@functools.lru_cache(maxsize=256)
def _groups_only(groups: int, names: tuple[tuple[str, int], ...]) -> re.Pattern:
    """A Python pattern with `groups` empty groups, named as `names` says: what Python's `re`
    needs to parse a template against them, matching nothing but '' (no time to speak of)."""
    name_of = {index: name for name, index in names}
    return re.compile("".join(f"(?P<{name_of[i]}>)" if i in name_of else "()" for i in range(1, groups + 1)))


ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
OCTAL = "01234567"


@functools.lru_cache(maxsize=1024)
def _template_pieces(template: str, names: tuple[tuple[str, int], ...]) -> tuple[str | int, ...]:
    """A checked template (check_template) as literal texts and group numbers, read as Python's
    `re` reads it: \\g<name> and \\g<N>, \\N and \\NN groups, \\0 and three-digit octal
    escapes, \\n and the other single-letter escapes, and any other \\X kept as it is."""
    groupindex, pieces, literal, i = dict(names), [], [], 0
    while i < len(template):
        char, following = template[i], template[i + 1: i + 2]
        if char != "\\" or not following:
            literal.append(char)
            i += 1
            continue
        piece, i = _escape_at(template, i, groupindex)
        if isinstance(piece, int):
            pieces += ["".join(literal), piece]
            literal = []
        else:
            literal.append(piece)
    return tuple(pieces + ["".join(literal)])


def _escape_at(template: str, i: int, groupindex: dict) -> tuple[str | int, int]:
    """The escape that starts at template[i] (a backslash): its text or group, and where it ends."""
    char = template[i + 1]
    if char == "g":
        end = template.index(">", i)
        name = template[i + 3: end]
        return (int(name) if not name.isidentifier() else groupindex[name]), end + 1
    if char == "0":
        end = i + 2
        while end < min(i + 4, len(template)) and template[end] in OCTAL:
            end += 1
        return chr(int(template[i + 1: end], 8) & 0xFF), end
    if char.isdigit() and char.isascii():
        digits = template[i + 1: i + 4]
        if len(digits) == 3 and all(d in OCTAL for d in digits):
            return chr(int(digits, 8)), i + 4
        two = len(digits) >= 2 and digits[1].isdigit() and digits[1].isascii()
        return int(digits[:2] if two else digits[0]), i + (3 if two else 2)
    return ESCAPES.get(char, "\\" + char), i + 2
