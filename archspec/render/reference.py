"""The reference tables of specs/README.md, generated from the ops' typed params.

Every option of every primitive, kind and score part, with its type, default and description,
is read from the declared Params models the checker validates with (as MLIR generates op docs
from ODS), through the listing `archspec primitives --json` prints. specs/README.md holds the
tables between markers that name the primitives each block covers:

    <!-- generated: reference tables of patchify (archspec primitives --markdown specs/README.md) -->
    ...
    <!-- end generated -->

`archspec primitives --markdown` prints the tables; `archspec primitives --markdown FILE`
rewrites every block of FILE in place; tests/cli/test_docs.py regenerates them and compares.
Hand-written prose lives outside the markers.

This module renders and splices text only: it is handed the listing (or a function giving one
primitive's entry), so it imports nothing from the CLI, which imports it.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

REGENERATE = "archspec primitives --markdown specs/README.md"
BEGIN = re.compile(r"^<!-- generated: reference tables of ([a-z0-9_, ]+) \(([^)]*)\) -->$", re.M)
END = "<!-- end generated -->"
HEAD = "| option | type | default | description |\n|---|---|---|---|"


def begin_marker(primitives: Iterable[str]) -> str:
    return f"<!-- generated: reference tables of {', '.join(primitives)} ({REGENERATE}) -->"


def markdown(listing: list[dict]) -> str:
    """The tables of every primitive in the listing (entries as `archspec primitives --json` gives)."""
    return "\n\n".join(primitive_markdown(p) for p in listing)


def primitive_markdown(p: dict) -> str:
    kinds = [k for k in p["kinds"] if not k.get("plugin")]  # a plugin's kinds are its own docs' to list
    name = f"`{p['primitive']}`"
    if kinds and kinds[0]["kind"] is None:
        doc = _sentence(kinds[0]["doc"])
        out = [f"**{name}**" + (f": {doc}" if doc else "")]
        out.append(_table(kinds[0]["options"]) if kinds[0]["options"] else "No options.")
    else:
        out = [f"**{name}** kinds" + (f" (default `{p['default_kind']}`)" if p.get("default_kind") else
                                      " (`kind:` is required)") + ":",
               "| kind | what |\n|---|---|\n" + "\n".join(f"| `{k['kind']}` | {_cell(_sentence(k['doc']))} |"
                                                      for k in kinds)]
        for who, options in _groups(kinds):
            out += [f"Options of {who}:", _table(options)]
        bare = [k["kind"] for k in kinds if not k["options"]]
        if bare:
            out.append(f"No options: {_names(bare)}.")
    parts = p.get("score_parts") or []
    if parts:
        out.append(f"Score parts of {name} (`scores:`):")
        out.append("| part | what | fused |\n|---|---|---|\n" +
                   "\n".join(f"| `{s['part']}` | {_cell(s['doc'])} | {'yes' if s['fused'] else 'no'} |"
                             for s in parts))
        for s in parts:
            if s["options"]:
                out += [f"Options of the part `{s['part']}`:", _table(s["options"])]
    return "\n\n".join(out)


def _groups(kinds: list[dict]) -> list[tuple[str, list[dict]]]:
    """Options grouped by the kinds that share them exactly (name, type, default and doc), so an
    option common to all kinds is listed once: (who, options), the widest groups first."""
    order = [k["kind"] for k in kinds]
    holders: dict[tuple, list[str]] = {}
    first: dict[tuple, dict] = {}
    for kind in kinds:
        for o in kind["options"]:
            key = _key(o)
            holders.setdefault(key, []).append(kind["kind"])
            first.setdefault(key, o)
    groups: dict[tuple[str, ...], list[dict]] = {}
    for key, who in holders.items():  # dict order: the first kind's fields first
        groups.setdefault(tuple(who), []).append(first[key])

    def rank(who: tuple[str, ...]):
        return (-len(who), [order.index(k) for k in who])

    result = []
    for who in sorted(groups, key=rank):
        label = "every kind" if len(who) == len(kinds) and len(kinds) > 1 else \
            ("the kind " if len(who) == 1 else "the kinds ") + _names(who)
        result.append((label, groups[who]))
    return result


def _key(o: dict) -> tuple:
    return (o["name"], o["type"], o["required"], repr(o["default"]), o["doc"])


def _names(names: Iterable[str]) -> str:
    names = [f"`{n}`" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _table(options: list[dict]) -> str:
    rows = [f"| `{o['name']}` | {_cell(o['type'])} | {'required' if o['required'] else _cell(_shown(o['default']))} "
            f"| {_cell(o['doc'])} |" for o in options]
    return HEAD + "\n" + "\n".join(rows)


def _shown(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)


def _sentence(doc: str) -> str:
    return " ".join((doc or "").split())


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# -- the blocks of a file -----------------------------------------------------------------------
def blocks(text: str) -> list[tuple[list[str], int, int]]:
    """(primitives, start, end) of every generated block: the text between the end of its begin
    marker's line and the start of its end marker."""
    found = []
    for match in BEGIN.finditer(text):
        start = match.end() + 1
        end = text.find(END, start)
        if end < 0:
            raise ValueError(f"the block of {match[1]} has no '{END}'")
        found.append(([n.strip() for n in match[1].split(",") if n.strip()], start, end))
    return found


def splice(text: str, describe: Callable[[str], dict]) -> str:
    """The text with every generated block (and its begin marker) regenerated from the code."""
    out, at = [], 0
    for names, start, end in blocks(text):
        marker_start = text.rfind("\n", 0, start - 1) + 1
        out.append(text[at:marker_start])
        out.append(begin_marker(names) + "\n\n" + markdown([describe(n) for n in names]) + "\n\n")
        at = end
    out.append(text[at:])
    return "".join(out)


def covered(text: str) -> list[str]:
    """Every primitive some block of the text covers, in order (a name twice is listed twice)."""
    return [n for names, _, _ in blocks(text) for n in names]
