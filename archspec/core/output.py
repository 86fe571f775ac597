"""Printing diagnostics: errors and warnings as text (with the source line and a caret) on
stderr, or as JSON records; and the streams every command prints through, which show control
characters as visible escapes. Here, below the face, so that the `archspec` command (cli/) and
`python -m archspec.train` print the same way without importing each other."""

from __future__ import annotations

import contextlib
import json
import sys

from .errors import Diagnostic, LocatedError
from .render import render
from .visible import visible


class VisibleStream:
    """A text stream that writes control characters (ESC, CR, C0, C1...) as visible escapes
    (`\\x1b`, `\\r`), so that a name or key from a spec cannot clear the terminal, retitle its
    window or overwrite a line with its own text. Line breaks and tabs pass; anything else
    (flush, fileno, buffer for binary protocols) is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text, keep="\n\t"))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def visible_streams():
    """sys.stdout and sys.stderr as VisibleStreams for the block: what a command prints for
    people shows a spec's control characters, never obeys them."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = VisibleStream(sys.stdout), VisibleStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


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
