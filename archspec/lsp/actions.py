"""Code actions: each did-you-mean as a quick fix that puts the word meant in place of the word
written (`mpl` -> `mlp`, `windw` -> `window`, `from: encodr` -> `encoder`, `${widht}` -> `width`).

The words come as data on the diagnostic (core/words.py `DidYouMean`: the word as written and
the word meant), never read back from the hint's text. The fix replaces the written word where
the diagnostic points (the first whole occurrence at or after its start on that line, else on
that line anywhere), in the document's newest text: a diagnostic whose line has changed since
its check, or no longer holds the word, offers no fix rather than a wrong one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .analysis import Analysis, Found, diagnostics
from .lines import line_in


@dataclass(frozen=True)
class Fix:
    """Replace text[line][start:end] (0-based, in the newest text) with `meant`."""

    line: int
    start: int
    end: int
    written: str
    meant: str
    found: Found  # the diagnostic it fixes (as its check placed it)
    found_line: int  # that diagnostic's line in the newest text

    @property
    def title(self) -> str:
        return f"Change '{self.written}' to '{self.meant}'"


def fixes(analysis: Analysis, newest: str, first_line: int, last_line: int) -> list[Fix]:
    """The did-you-mean fixes of the diagnostics on lines `first_line`..`last_line` (0-based,
    of the newest text)."""
    lines = newest.split("\n")
    found = []
    for diagnostic in diagnostics(analysis):
        if diagnostic.fix is None:
            continue
        line = line_in(newest, analysis.text, diagnostic.line)  # its line in the newest text
        if line is None or not first_line <= line <= last_line or line >= len(lines):
            continue
        written, meant = diagnostic.fix
        span = _whole_word(lines[line], written, diagnostic.start)
        if span is not None:
            found.append(Fix(line, span[0], span[1], written, meant, diagnostic, line))
    return found


def _whole_word(text: str, word: str, start: int) -> tuple[int, int] | None:
    """Where `word` stands on its own in `text` (not inside a longer name): the first such
    place at or after `start`, else the first anywhere."""
    pattern = re.compile(r"(?<![\w\-])" + re.escape(word) + r"(?![\w\-])")
    hits = [m.span() for m in pattern.finditer(text)]
    later = [h for h in hits if h[0] >= start]
    return (later or hits or [None])[0]


def apply(text: str, fix: Fix) -> str:
    """The text with the fix made (for tests and for clients that want it done here)."""
    lines = text.split("\n")
    row = lines[fix.line]
    lines[fix.line] = row[:fix.start] + fix.meant + row[fix.end:]
    return "\n".join(lines)
