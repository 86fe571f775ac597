"""Where a block's use gave the value an error is about.

A block reads its arguments as `${name}` (`heads: ${heads}`). An error about such a value is
found inside the block, but the number is the use's (`myblock: {heads: 5}`): the diagnostic
points there, and its message says where the block reads it. Nested uses are followed
outwards while the value is again a bare argument of the block around it (the trials found
errors reported "at the block's line, not at my value").
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Iterable

from ..core.errors import Diagnostic, SpecError
from ..core.ir import BlockUse, Graph
from .loader import Document
from .param_types import value_at

_PATHS_BY_LOC: list = [None, 0, None]  # [the last document's locs, their count, loc -> its first path]


def paths_by_loc(doc: Document) -> dict:
    """loc -> the first document path written there (a spec with 3,000 errors asked each of its
    12,000 values once per error: 36 million comparisons, 24 s of CPU)."""
    if _PATHS_BY_LOC[0] is not doc.locs or _PATHS_BY_LOC[1] != len(doc.locs):
        index: dict = {}
        for path, loc in doc.locs.items():
            index.setdefault(loc, path)
        _PATHS_BY_LOC[:] = [doc.locs, len(doc.locs), index]
    return _PATHS_BY_LOC[2]


def bare_name(value: Any) -> str | None:
    """'heads' for the whole value `${heads}`; None for anything else."""
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        name = value[2:-1].strip()
        return name if name.isidentifier() else None
    return None


def at_the_use(d: Diagnostic, uses: Iterable[BlockUse], doc: Document) -> Diagnostic:
    """`d` pointed at the value the use gave, when it is about a block's bare `${argument}`
    (`uses`: the uses around the node, innermost first)."""
    loc, trail = d.loc, []
    for use in uses:
        path = paths_by_loc(doc).get(loc) if loc is not None else None
        if path is None or path[:2] != ("blocks", use.block):
            break
        name = bare_name(value_at(doc.data, path))
        given = dict(use.given).get(name) if name else None
        if given is None:
            break
        trail.append(f"${{{name}}} of block `{use.block}` at {os.path.basename(loc.file)}:{loc.line}")
        loc = given
    if not trail:
        return d
    return replace(d, loc=loc, message=f"{d.message} (read as {', given as '.join(trail)})")


def uses_around(graph: Graph, node_path: str | None) -> list[BlockUse]:
    """The block uses whose paths hold `node_path`, innermost first."""
    if not node_path:
        return []
    parts = node_path.split(".")
    prefixes = (".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1))
    return [graph.block_uses[p] for p in prefixes if p in graph.block_uses]


def located_at_uses(exc: SpecError, graph: Graph | None, doc: Document) -> SpecError:
    """`exc` with each diagnostic about a block's argument pointed at the use that gave it."""
    if graph is None or not graph.block_uses:
        return exc
    moved = [at_the_use(d, uses_around(graph, d.path), doc) for d in exc.diagnostics]
    return exc if moved == exc.diagnostics else type(exc)(moved, exc.sources)


__all__ = ["at_the_use", "uses_around", "located_at_uses", "paths_by_loc", "bare_name"]
