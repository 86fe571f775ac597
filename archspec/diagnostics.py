"""One located error type for everything wrong with a spec.

Every problem a user can cause ends here: a `Diagnostic` (file, line, column, node path,
message, hint) and a `SpecError` that carries one or more of them. The CLI renders them
with the offending source line and a caret; `--json` prints them as records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    """A position in a source file; line and col are 1-based."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    message: str
    loc: Loc | None = None
    path: str | None = None  # dotted node path, when the problem belongs to a node
    hint: str | None = None
    severity: str = "error"

    def record(self) -> dict:
        """The JSON form printed by `archspec check --json`."""
        loc = self.loc
        return {
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "col": loc.col if loc else None,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
        }

    def headline(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        node = f"{self.path}: " if self.path else ""
        return f"{where}{self.severity}: {node}{self.message}"


class SpecError(Exception):
    """A spec could not be checked or built; carries every diagnostic found."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__("\n".join(d.headline() for d in self.diagnostics))

    # The first diagnostic's fields, for callers that handle one error at a time.
    @property
    def message(self) -> str:
        return self.diagnostics[0].message

    @property
    def loc(self) -> Loc | None:
        return self.diagnostics[0].loc

    @property
    def path(self) -> str | None:
        return self.diagnostics[0].path

    @property
    def hint(self) -> str | None:
        return self.diagnostics[0].hint


def error(message: str, loc: Loc | None = None, path: str | None = None, hint: str | None = None) -> SpecError:
    """Shorthand: `raise error(...)`."""
    return SpecError(Diagnostic(message, loc, path, hint))


@dataclass
class Collector:
    """Gathers independent diagnostics so one run reports them all."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    _seen: set = field(default_factory=set, repr=False)

    def add(self, exc: SpecError) -> None:
        for diag in exc.diagnostics:
            # The same problem at the same place (a repeated node or block): report it once.
            key = (diag.loc, diag.message, diag.hint)
            if key not in self._seen:
                self._seen.add(key)
                self.diagnostics.append(diag)

    def raise_if_any(self) -> None:
        if self.diagnostics:
            raise SpecError(self.diagnostics)


def did_you_mean(word: str, choices) -> str | None:
    """A hint naming the closest known word, if one is close enough."""
    import difflib  # only when a hint is wanted: keeps `archspec check` start-up short

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def one_of(choices) -> str:
    return ", ".join(str(c) for c in choices)


_source_cache: dict[str, list[str]] = {}


def remember_source(file: str, text: str) -> None:
    """Keep the text of a loaded file so diagnostics can quote its lines."""
    _source_cache[file] = text.splitlines()


def _source_line(loc: Loc) -> str | None:
    lines = _source_cache.get(loc.file)
    if lines is None and os.path.isfile(loc.file):
        try:
            with open(loc.file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        _source_cache[loc.file] = lines
    if lines and 1 <= loc.line <= len(lines):
        return lines[loc.line - 1]
    return None


def render(diag: Diagnostic) -> str:
    """Human form: headline, the source line with a caret under the column, the hint."""
    out = [diag.headline()]
    if diag.loc:
        line = _source_line(diag.loc)
        if line is not None:
            number = str(diag.loc.line)
            gutter = " " * len(number)
            out.append(f" {number} | {line}")
            caret_pad = "".join(c if c == "\t" else " " for c in line[: diag.loc.col - 1])
            out.append(f" {gutter} | {caret_pad}^")
    if diag.hint:
        out.append(f"  hint: {diag.hint}")
    return "\n".join(out)


def as_records(exc: SpecError) -> list[dict]:
    return [d.record() for d in exc.diagnostics]


__all__ = ["Loc", "Diagnostic", "SpecError", "Collector", "error", "did_you_mean", "render", "as_records"]
