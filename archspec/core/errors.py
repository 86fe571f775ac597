"""One error model for everything archspec reports.

- `Diagnostic`: one located problem (file, line, column, node path, message, hint) with a
  severity, `error` or `warning`. A shape rule's diagnostic also carries its `Suggestion`
  (suggestions.py), the hint as data, which the whole-spec solver refines.
- `SpecError`: the spec (or a file it names) is wrong. The CLI exits with 1.
- `InternalError`: a bug in archspec (or in torch and its exporters): the spec passed the
  checker and still something failed. It is located at the spec node where it happened when
  that is known. The CLI exits with 3 and says it is a bug.
- `UsageError`: the command line or an API argument is wrong (a bad flag, a missing file).
  The CLI exits with 2.

Errors are raised where they arise; nothing patches attributes on them afterwards. An error
may carry the text of the sources it points into (`sources`), so that it renders with the
offending line even when the text never was a file (a spec given as text, `--set`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Literal

from .suggestions import Suggestion
from .visible import visible

Severity = Literal["error", "warning"]


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
    severity: Severity = "error"
    suggestion: Suggestion | None = None  # a rule's structured hint; with one, `hint` is its text

    def __post_init__(self):
        if self.suggestion is not None:  # the one place a suggestion becomes words
            object.__setattr__(self, "hint", self.suggestion.text())

    def record(self) -> dict:
        """The JSON form printed by `archspec check --json`."""
        loc = self.loc
        return {
            "severity": self.severity,
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

    def text(self) -> str:
        """The headline and, on the next line, the hint."""
        return self.headline() + (f"\n  hint: {self.hint}" if self.hint else "")


class LocatedError(Exception):
    """An error that carries diagnostics (and, optionally, the text of the sources they point into)."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic, sources: dict[str, str] | None = None):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.sources: dict[str, str] = dict(sources or {})
        super().__init__(visible("\n".join(d.text() for d in self.diagnostics), keep="\n\t"))  # a key's \x01 shown

    def with_sources(self, sources: dict[str, str]) -> "LocatedError":
        """The same error, also knowing these source texts (those it knows already win)."""
        for name, text in sources.items():
            self.sources.setdefault(name, text)
        return self

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


class SpecError(LocatedError):
    """A spec could not be checked or built; carries every diagnostic found."""


class InternalError(LocatedError):
    """A bug: something failed after the spec passed the checker. Located at the spec node
    where it happened when that is known; the original exception is its __cause__."""


class UsageError(Exception):
    """A wrong command-line flag or API argument (exit code 2)."""


def error(message: str, loc: Loc | None = None, path: str | None = None, hint: str | None = None) -> SpecError:
    """Shorthand: `raise error(...)`."""
    return SpecError(Diagnostic(message, loc, path, hint))


def bug(message: str, loc: Loc | None = None, path: str | None = None, hint: str | None = None) -> InternalError:
    """Shorthand: `raise bug(...)` for a failure that is archspec's (or torch's), not the spec's."""
    return InternalError(Diagnostic(message, loc, path, hint))


def warning(message: str, loc: Loc | None = None, path: str | None = None, hint: str | None = None) -> Diagnostic:
    return Diagnostic(message, loc, path, hint, severity="warning")


@dataclass
class Collector:
    """Gathers independent diagnostics so one run reports them all."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    _seen: set = field(default_factory=set, repr=False)

    def add(self, exc: SpecError) -> None:
        self.extend(exc.diagnostics)

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        for diag in diagnostics:
            # The same problem at the same place (a repeated node or block): report it once.
            key = (diag.loc, diag.message, diag.hint, diag.severity)
            if key not in self._seen:
                self._seen.add(key)
                self.diagnostics.append(diag)

    def raise_if_any(self) -> None:
        if self.diagnostics:
            raise SpecError(self.diagnostics)


__all__ = ["Loc", "Diagnostic", "LocatedError", "SpecError", "InternalError", "UsageError", "Collector", "error",
           "bug", "warning"]
