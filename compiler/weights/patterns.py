"""Regular expressions from a mapping file, compiled with bounds and located errors.

A mapping file is text someone else may have written, and its patterns run against every key
of a checkpoint. So a pattern is refused, at the place in the file where it is written, when
it does not compile, when it is longer than MAX_PATTERN_CHARS, or when it nests one unbounded
repetition inside another (`(a+)+`, `(.*)*`), the shape that makes a backtracking matcher take
exponential time. Replacement templates (`\\1`, `\\g<name>`) are checked against the groups of
the pattern they go with.
"""

from __future__ import annotations

import re

from archspec.core.errors import Loc, error

MAX_PATTERN_CHARS = 300  # a tensor-name pattern is a line of text
PATTERN_HINT = "patterns are Python regular expressions searched in each key; anchor them with ^ and $"

try:  # the parser behind re.compile, to see a pattern's structure (a private module: optional)
    import re._parser as _parser  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Pythons: the length bound still holds
    _parser = None


def compile_pattern(text: str, loc: Loc | None, what: str = "pattern") -> re.Pattern:
    """`text` compiled, or a located error saying what is wrong with it."""
    if len(text) > MAX_PATTERN_CHARS:
        raise error(f"{what} is {len(text)} characters long; at most {MAX_PATTERN_CHARS} are allowed", loc,
                    hint="a pattern names tensors: match a prefix or a part of a key, not a whole list of keys")
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise error(f"{what} '{text}' is not a valid regular expression: {exc.msg} at position {exc.pos}", loc,
                    hint=PATTERN_HINT) from None
    if _nests_unbounded_repeats(text):
        raise error(f"{what} '{text}' repeats a group that itself repeats without bound", loc,
                    hint="nested repetition such as (a+)+ or (.*)* can take exponential time; "
                         "repeat the inner part only, e.g. (a+) or .*")
    return pattern


def check_template(pattern: re.Pattern, template: str, loc: Loc | None, what: str = "replacement") -> str:
    """`template` if it only refers to groups `pattern` has, else a located error."""
    if len(template) > MAX_PATTERN_CHARS:
        raise error(f"{what} is {len(template)} characters long; at most {MAX_PATTERN_CHARS} are allowed", loc)
    try:
        pattern.sub(template, "")  # compiles the template against the pattern's groups
    except re.error as exc:
        groups = pattern.groups
        have = f"the pattern has {groups} group{'s' if groups != 1 else ''}" if groups else "the pattern has no groups"
        raise error(f"{what} '{template}': {exc.msg}", loc,
                    hint=f"{have}; \\1 is the first group's text, \\g<name> a named group's, \\\\ a backslash") from None
    return template


def _nests_unbounded_repeats(text: str) -> bool:
    if _parser is None:
        return False
    try:
        return _nested(_parser.parse(text), inside=False)
    except Exception:  # noqa: BLE001 - the structure check is a guard, never a new failure
        return False


def _nested(items, inside: bool) -> bool:
    """Whether a parsed pattern holds an unbounded repeat inside another one."""
    for op, arg in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            _, high, body = arg
            unbounded = high == _parser.MAXREPEAT
            if (unbounded and inside) or _nested(body, inside or unbounded):
                return True
        elif any(_nested(body, inside) for body in _bodies(name, arg)):
            return True
    return False


def _bodies(name: str, arg) -> list:
    """The sub-patterns of a group, a lookaround, an alternation or a conditional."""
    if name == "ATOMIC_GROUP":
        return [arg]
    if name in ("SUBPATTERN", "ASSERT", "ASSERT_NOT"):
        return [arg[-1]]
    if name == "BRANCH":
        return list(arg[1])
    if name == "GROUPREF_EXISTS":
        return [body for body in arg[1:] if body is not None]
    return []
