"""Hints over the spec's own names ("did you mean 'encoder'?", "known here: a, b, c"), bounded.

A fuzzy search compares a word with every candidate, so a spec with thousands of nodes and
thousands of mistyped references would cost millions of comparisons, and a listing of every
known name would make each message as long as the spec. Within one check, at most
MAX_SEARCHES searches are made, each over at most MAX_CANDIDATES names (those sharing the
word's first letter, when there are more); listings show the first MAX_SHOWN names.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

from ..core.words import did_you_mean

MAX_SEARCHES = 20
MAX_CANDIDATES = 500
MAX_SHOWN = 12

_searches: contextvars.ContextVar[list | None] = contextvars.ContextVar("archspec_hint_searches", default=None)


@contextmanager
def hint_budget(searches: int = MAX_SEARCHES):
    """Bound the fuzzy searches made inside (one check)."""
    token = _searches.set([searches])
    try:
        yield
    finally:
        _searches.reset(token)


def suggest(word: str, choices) -> str | None:
    """`did you mean '...'?` for the closest of `choices`, within the budget; None otherwise."""
    budget = _searches.get()
    if budget is not None:
        if budget[0] <= 0:
            return None
        budget[0] -= 1
    names = list(dict.fromkeys(str(c) for c in choices))
    if len(names) > MAX_CANDIDATES:
        word = str(word)
        names = [n for n in names if n[:1] == word[:1] and abs(len(n) - len(word)) <= 3][:MAX_CANDIDATES]
    return did_you_mean(word, names)


def some(names, shown: int = MAX_SHOWN) -> str:
    """'a, b, c' for a few names; the first `shown` and how many more for many (without walking
    all of them more than once: this runs once per error)."""
    names = names if isinstance(names, (list, tuple)) else list(names)
    first: list[str] = []
    for name in names:
        if str(name) not in first:
            first.append(str(name))
            if len(first) == shown:
                break
    more = f", ... ({len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(first) + more
