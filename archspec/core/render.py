"""Diagnostics for people: the headline, the offending source line with a caret under the
column, and the hint. Source text comes from the error (specs given as text, `--set`
values) or, failing that, from the file on disk."""

from __future__ import annotations

import functools
import os

from .errors import Diagnostic, Loc


def source_line(loc: Loc, sources: dict[str, str] | None = None) -> str | None:
    """The line `loc` points at. A file read from disk is kept in `sources` (when given) so
    that rendering many diagnostics reads it once."""
    text = sources.get(loc.file) if sources is not None else None
    if text is None and os.path.isfile(loc.file):
        try:
            with open(loc.file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            text = ""
        if sources is not None:
            sources[loc.file] = text
    lines = split_lines(text) if text is not None else ()
    if 1 <= loc.line <= len(lines):
        return lines[loc.line - 1]
    return None


@functools.lru_cache(maxsize=8)
def split_lines(text: str) -> tuple[str, ...]:
    """The lines of a source, split once however many diagnostics point into it."""
    return tuple(text.splitlines())


def render(diag: Diagnostic, sources: dict[str, str] | None = None) -> str:
    """Human form: headline, the source line with a caret under the column, the hint."""
    out = [diag.headline()]
    if diag.loc:
        line = source_line(diag.loc, sources)
        if line is not None:
            number = str(diag.loc.line)
            gutter = " " * len(number)
            out.append(f" {number} | {line}")
            caret_pad = "".join(c if c == "\t" else " " for c in line[: diag.loc.col - 1])
            out.append(f" {gutter} | {caret_pad}^")
    if diag.hint:
        out.append(f"  hint: {diag.hint}")
    return "\n".join(out)
