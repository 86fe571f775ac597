"""Small helpers for plain-language messages: lists, plurals, "did you mean"."""

from __future__ import annotations


def did_you_mean(word: str, choices) -> str | None:
    """A hint naming the closest known word, if one is close enough."""
    import difflib  # only when a hint is wanted: keeps `archspec check` start-up short

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def one_of(choices) -> str:
    return ", ".join(str(c) for c in choices)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")
