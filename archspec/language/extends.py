"""`extends`: a spec laid over the spec it extends (and that one over its own base, and so on).

A spec that extends another starts from that spec's document: `params`, `dims`, `inputs`,
`targets` and `blocks` are overridden key by key; `name`, `doc`, `graph`, `outputs` and the
rest are replaced whole. Instead of a whole `graph`, the spec may edit its base's graph
(edits.py). Every value keeps the position of the file it came from. Which files `extends`
may name: paths.py (YAML files in the spec's folder tree or archspec's specs folder).
"""

from __future__ import annotations

import os
from typing import Callable

from ..core.errors import error
from ..core.words import did_you_mean
from .edits import edit_graph, refuse_edits_without_base
from .limits import MAX_EXTENDS
from .loader import Document, load_file
from .paths import named_file

MERGED_BY_KEY = ("params", "dims", "inputs", "targets", "blocks")


def with_bases(doc: Document, chain: tuple[str, ...] = ()) -> Document:
    """The document with the specs it extends laid under it (`chain`: the files extending it, to
    refuse a loop)."""
    data = doc.data
    if not isinstance(data, dict) or "extends" not in data:
        refuse_edits_without_base(doc)
        return doc
    target = data["extends"]
    loc = doc.loc(("extends",))
    if not isinstance(target, str):
        raise error("`extends` must be a path to another spec", loc)
    root = chain[0] if chain else doc.file
    path = named_file(target, doc.file, root, loc, "extends")  # refused before it is looked for
    here = os.path.abspath(doc.file)
    if os.path.abspath(path) in chain + (here,):
        names = " -> ".join(os.path.basename(p) for p in chain + (here, path))
        raise error(f"extends forms a loop: {names}", loc)
    if len(chain) >= MAX_EXTENDS:
        raise error(f"more than {MAX_EXTENDS} levels of extends", loc)
    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        try:
            siblings = sorted(f for f in os.listdir(folder) if f.endswith((".yaml", ".yml")))
        except OSError:
            siblings = []
        hint = did_you_mean(os.path.basename(path), siblings)
        hint = hint or f"paths in `extends` are relative to the folder of {os.path.basename(doc.file)}"
        raise error(f"extends: no such file {target}", loc, hint=hint)
    base = with_bases(load_file(path), chain + (here,))
    if not isinstance(base.data, dict):
        raise error("the extended spec is not a mapping", loc)
    return merge(base, doc)


def _under(prefix: tuple) -> Callable[[tuple], bool]:
    n = len(prefix)
    return lambda path: path[:n] == prefix


def _under_names(key: str, names: set) -> Callable[[tuple], bool]:
    """Paths inside `key.name` for any of `names`: one pass over the tables, however many names."""
    return lambda path: len(path) >= 2 and path[0] == key and path[1] in names


def _take_where(dst: Document, src: Document, inside: Callable[[tuple], bool]) -> None:
    for dst_table, src_table in ((dst.locs, src.locs), (dst.key_locs, src.key_locs)):
        dst_table.update({p: loc for p, loc in src_table.items() if inside(p)})
    dst.quoted |= {p for p in src.quoted if inside(p)}


def merge(base: Document, child: Document) -> Document:
    """The child's document laid over its base's."""
    out = Document(child.file, dict(base.data), dict(base.locs), dict(base.key_locs), set(base.quoted),
                   {**base.sources, **child.sources})
    out.data.pop("extends", None)
    out.drop_positions(("extends",))
    out.locs[()] = child.locs[()]
    for key, value in child.data.items():
        if key == "extends":
            continue
        if key in MERGED_BY_KEY and isinstance(value, dict) and isinstance(out.data.get(key), dict):
            inside = _under_names(key, set(value))
            out.drop_positions_where(inside)
            out.data[key] = {**out.data[key], **value}
            _take_where(out, child, inside)
            out.key_locs[(key,)] = child.key_locs[(key,)]
            continue
        out.drop_positions((key,))
        out.data[key] = value
        _take_where(out, child, _under((key,)))
    edit_graph(out, child, base.file)
    return out
