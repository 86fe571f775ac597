"""`extends`: a spec laid over the spec it extends (and that one over its own base, and so on).

A spec that extends another starts from that spec's document: `params`, `param_types`,
`timm_args`, `pretrained_cfg`, `dims`, `inputs`, `targets` and `blocks` are overridden key by key (an input or a
target given `~` is removed: the Q-Former trial's learned queries in place of an input); `name`, `doc`,
`graph`, `outputs` and the rest are replaced whole. Instead of a whole `graph`, the spec may edit its base's graph
(edits.py). Every value keeps the position of the file it came from. Which files `extends`
may name: paths.py (YAML files in the spec's folder tree or archspec's specs folder). A shipped
spec may be named from any folder by its name (`extends: llama`) or its file name
(`extends: llama.yaml`); a file of that name beside the spec wins over the shipped one.

A chain is bounded as a whole, not only file by file: at most MAX_EXTENDS levels, and at most
MAX_VALUES values in all its files together (limits.py), so that checking a spec that extends
others costs no more than checking one spec file of the largest size. Laying a spec over its base
takes time in proportion to the two files, not to the chain so far: the base's document, which
nothing else holds, is reused, and only the positions of the values the spec replaces are
dropped (found by walking those values, not by scanning every position of the chain), and a
graph that several specs of the chain edit is laid out once, after the last edit.
"""

from __future__ import annotations

import os

from ..core.errors import Loc, error
from ..core.shipped import closest_names, looks_like_a_name, shipped_spec_named
from ..core.words import did_you_mean
from .edits import edit_graph, refuse_edits_without_base, write_graph
from .limits import MAX_EXTENDS, MAX_VALUES
from .loader import Document, load_file
from .paths import named_file
from .schema import GROUP

MERGED_BY_KEY = ("params", "param_types", "timm_args", "pretrained_cfg", "dims", "inputs", "targets", "blocks")
REMOVABLE = ("inputs", "targets")  # `name: ~` removes the base's input or target (no input is null)


def with_bases(doc: Document) -> Document:
    """The document with the specs it extends laid under it."""
    out, edited = _laid(doc, (), 0)
    if edited is not None:
        write_graph(out, edited)
    return out


def _laid(doc: Document, chain: tuple[str, ...], held: int) -> tuple[Document, list | None]:
    """The document with the specs it extends laid under it, and its graph as edits left it when
    they did (not yet written into the document). `chain`: the files extending it, to refuse a
    loop; `held`: the values those files hold, to bound the chain as a whole."""
    data = doc.data
    if not isinstance(data, dict) or "extends" not in data:
        refuse_edits_without_base(doc)
        return doc, None
    target = data["extends"]
    loc = doc.loc(("extends",))
    if not isinstance(target, str):
        raise error("`extends` must be a path to another spec", loc)
    root = chain[0] if chain else doc.file
    path = extended_file(target, doc.file, root, loc)
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
    held += value_count(doc)
    base = load_file(path)
    if held + value_count(base) > MAX_VALUES:
        raise error(f"extends: {target} makes the chain hold more than {MAX_VALUES:,} values (keys and values, "
                    "in this spec and every spec it extends: archspec's limit)", loc,
                    hint="a spec and its bases together stay small: repeat structure with `blocks` and `repeat`")
    base, edited = _laid(base, chain + (here,), held)
    if not isinstance(base.data, dict):
        raise error("the extended spec is not a mapping", loc)
    return merge(base, doc, edited)


def extended_file(target: str, named_by: str, root: str, loc: Loc | None) -> str:
    """The file `extends: target` leads to, for the file `named_by` of the spec at `root`: a file
    relative to `named_by`'s folder (the rule of paths.py, applied before it is looked for), else
    the shipped spec that `target` names (`llama` or `llama.yaml`). A name with no folder and no
    suffix is a shipped spec's name only, as on the command line."""
    shipped = shipped_spec_named(target)
    if looks_like_a_name(target):
        if shipped is not None:
            return shipped
        raise error(f"extends: no such shipped spec {target}", loc,
                    hint=_shipped_hint(target) or "a file is named with its suffix (`extends: base.yaml`); "
                                                  "`archspec models` lists the shipped specs")
    path = named_file(target, named_by, root, loc, "extends")  # refused before it is looked for
    if shipped is not None and not os.path.isfile(path):
        return shipped
    return path


def _shipped_hint(target: str) -> str | None:
    stem = os.path.splitext(os.path.basename(target))[0]
    close = closest_names(stem)
    return f"did you mean the shipped spec {' or '.join(close)}?" if close else None


def value_count(doc: Document) -> int:
    """The values (keys and values, aliases expanded) of a loaded document: one position each."""
    return len(doc.locs) + len(doc.key_locs)


def take_positions(out: Document, child: Document, merged: set[str]) -> None:
    """The child's positions into `out`, but for its `extends` and the mappings it merged into
    its base's key by key (those keep the base's position for the mapping itself)."""
    def kept(path: tuple) -> bool:
        return not path or (path[0] != "extends" and not (len(path) == 1 and path[0] in merged))

    out.locs.update((p, loc) for p, loc in child.locs.items() if kept(p))
    out.key_locs.update((p, loc) for p, loc in child.key_locs.items() if p[0] != "extends")
    out.quoted.update(p for p in child.quoted if p and p[0] != "extends")


def merge(base: Document, child: Document, edited: list | None = None) -> tuple[Document, list | None]:
    """The child's document laid over its base's (the base's document, held by no one else, is
    reused: only the positions of the values the child replaces are dropped), and the graph as
    edits left it (`edited`: as the base's edits left it, not yet written; None: the document's)."""
    base_file, data = base.file, base.data
    out = base
    out.file, out.sources = child.file, {**base.sources, **child.sources}
    if "extends" in data:
        out.drop_positions_of(("extends",), data.pop("extends"))
    merged: set[str] = set()
    for key, value in child.data.items():
        if key == "extends":
            continue
        before = data.get(key)
        if key in MERGED_BY_KEY and isinstance(value, dict) and isinstance(before, dict):
            for name in value.keys() & before.keys():
                out.drop_positions_of((key, name), before[name])
            removed = {name for name, given in value.items() if given is None and key in REMOVABLE}
            data[key] = {name: v for name, v in {**before, **value}.items() if name not in removed}
            merged.add(key)
            continue
        if key in data:
            out.drop_positions_of((key,), before)
        if key == GROUP:
            edited = None  # the child's own graph, whole
        data[key] = value
    take_positions(out, child, merged)
    return out, edit_graph(out, child, base_file, edited)
