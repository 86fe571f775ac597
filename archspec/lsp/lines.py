"""Where a line of one text of a document is in another text of it (the text a check saw, and
the newest text the editor sent): hover, definition, completion and code actions answer from
the last finished check, which may be a few keystrokes old."""

from __future__ import annotations


def line_in(old: str, new: str, line: int) -> int | None:
    """Where the 0-based `line` of the new text is in the old one: the same line above the lines
    that differ, shifted by the lines added or removed below them; inside them, only when one
    line changed into one line (its old text); else None."""
    a, b = old.split("\n"), new.split("\n")
    shortest = min(len(a), len(b))
    start = next((i for i in range(shortest) if a[i] != b[i]), shortest)
    tail = next((i for i in range(shortest - start) if a[-1 - i] != b[-1 - i]), shortest - start)
    if line < start:
        return line
    if line >= len(b) - tail:  # below the lines that differ
        return line - len(b) + len(a)
    one_line_each = len(a) - tail - start == 1 and len(b) - tail - start == 1
    return line if one_line_each else None
