"""Printing diagnostics: errors and warnings as text (with the source line and a caret) on
stderr, or as JSON records."""

from __future__ import annotations

import json
import sys

from ..core.errors import Diagnostic, LocatedError
from ..core.render import render


def print_diagnostics(diagnostics: list[Diagnostic], sources: dict[str, str] | None = None) -> None:
    sources = dict(sources or {})
    for diag in diagnostics:
        print(render(diag, sources), file=sys.stderr)


def print_errors(exc: LocatedError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"errors": [d.record() for d in exc.diagnostics]}, indent=2))
        return
    print_diagnostics(exc.diagnostics, exc.sources)
    count = len(exc.diagnostics)
    print(f"{count} error{'s' if count != 1 else ''}", file=sys.stderr)


def print_warnings(warnings: list[Diagnostic]) -> None:
    """Warnings on stderr, after the report (JSON output carries them in the document)."""
    if warnings:
        print_diagnostics(warnings)
        print(f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}", file=sys.stderr)
