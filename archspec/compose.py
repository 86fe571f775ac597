"""Assemble one spec document from its file, the files it `extends`, and `--set` overrides.

A spec that extends another starts from that spec's document: `params`, `dims`, `inputs`
and `blocks` are overridden key by key; `name`, `doc`, `graph` and `outputs` are replaced
whole. `--set key=value` then overrides params. Every value keeps the position of the file
(or the command line) it came from.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

from .diagnostics import Loc, SpecError, did_you_mean, error, remember_source
from .loader import Document, load_file, load_text

MERGED_BY_KEY = ("params", "dims", "inputs", "blocks")
MAX_EXTENDS = 16
COMMAND_LINE = "<command line>"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_yaml_text(spec: str) -> bool:
    """A spec given as text rather than a path: it has a newline or a mapping colon."""
    return "\n" in spec or (":" in spec and not os.path.exists(spec))


def load_source(spec: str | os.PathLike) -> Document:
    if isinstance(spec, os.PathLike) or not is_yaml_text(spec):
        return load_file(os.fspath(spec))
    return load_text(spec, "<spec>")


def compose(spec: str | os.PathLike, overrides: Mapping[str, object] | None = None) -> Document:
    doc = _with_bases(load_source(spec), [])
    if overrides:
        doc = apply_overrides(doc, overrides)
    return doc


def _with_bases(doc: Document, chain: list[str]) -> Document:
    data = doc.data
    if not isinstance(data, dict) or "extends" not in data:
        return doc
    target = data["extends"]
    loc = doc.loc(("extends",))
    if not isinstance(target, str):
        raise error("`extends` must be a path to another spec", loc)
    base_dir = os.path.dirname(doc.file) if os.path.isfile(doc.file) else os.getcwd()
    path = os.path.normpath(os.path.join(base_dir, target))
    here = os.path.abspath(doc.file)
    if os.path.abspath(path) in chain + [here]:
        names = " -> ".join(os.path.basename(p) for p in chain + [here, path])
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
    base = _with_bases(load_file(path), chain + [here])
    if not isinstance(base.data, dict):
        raise error("the extended spec is not a mapping", loc)
    return merge(base, doc)


def _drop(doc: Document, prefix: tuple) -> None:
    n = len(prefix)
    for table in (doc.locs, doc.key_locs):
        for path in [p for p in table if p[:n] == prefix]:
            del table[path]
    doc.quoted = {p for p in doc.quoted if p[:n] != prefix}


def _take(dst: Document, src: Document, prefix: tuple) -> None:
    n = len(prefix)
    for dst_table, src_table in ((dst.locs, src.locs), (dst.key_locs, src.key_locs)):
        dst_table.update({p: loc for p, loc in src_table.items() if p[:n] == prefix})
    dst.quoted |= {p for p in src.quoted if p[:n] == prefix}


def merge(base: Document, child: Document) -> Document:
    """The child's document laid over its base's."""
    out = Document(child.file, dict(base.data), dict(base.locs), dict(base.key_locs), set(base.quoted))
    out.data.pop("extends", None)
    _drop(out, ("extends",))
    out.locs[()] = child.locs[()]
    for key, value in child.data.items():
        if key == "extends":
            continue
        if key in MERGED_BY_KEY and isinstance(value, dict) and isinstance(out.data.get(key), dict):
            merged = dict(out.data[key])
            for name, item in value.items():
                _drop(out, (key, name))
                merged[name] = item
                _take(out, child, (key, name))
            out.data[key] = merged
            out.key_locs[(key,)] = child.key_locs[(key,)]
            continue
        _drop(out, (key,))
        out.data[key] = value
        _take(out, child, (key,))
    return out


def parse_override(text: str) -> tuple[str, str]:
    """'key=value' from the command line; a usage error (ValueError) if malformed."""
    key, sep, value = text.partition("=")
    if not sep or not _KEY.fullmatch(key.strip()):
        raise ValueError(f"--set takes key=value, got {text!r}")
    return key.strip(), value


def apply_overrides(doc: Document, overrides: Mapping[str, object]) -> Document:
    """Override params. String values are parsed as YAML (`[2, 2, 18, 2]`, `${...}`)."""
    params = doc.data.get("params") if isinstance(doc.data, dict) else None
    if not isinstance(params, dict):
        params = {}
    lines = [f"{k}={v}" for k, v in overrides.items()]
    remember_source(COMMAND_LINE, "\n".join(lines))
    out = Document(doc.file, dict(doc.data), dict(doc.locs), dict(doc.key_locs), set(doc.quoted))
    new_params = dict(params)
    problems = []
    for line_no, (key, value) in enumerate(overrides.items(), start=1):
        if key not in params:
            hint = did_you_mean(key, params) or (f"params: {', '.join(params)}" if params else "this spec has no params")
            problems.append(error(f"--set: unknown parameter '{key}'", Loc(COMMAND_LINE, line_no, 1), hint=hint))
            continue
        shift = len(key) + 1
        if isinstance(value, str):
            try:
                parsed = load_text(value if value.strip() else "null", COMMAND_LINE)
            except SpecError as exc:
                d = exc.diagnostics[0]
                col = (d.loc.col if d.loc else 1) + shift
                problems.append(error(d.message, Loc(COMMAND_LINE, line_no, col), hint=d.hint))
                continue
        else:
            parsed = Document(COMMAND_LINE, value, {(): Loc(COMMAND_LINE, line_no, 1)})
        _drop(out, ("params", key))
        new_params[key] = parsed.data
        for path, loc in parsed.locs.items():
            col = loc.col + shift if loc.line == 1 else loc.col
            out.locs[("params", key) + path] = Loc(COMMAND_LINE, line_no + loc.line - 1, col)
        out.quoted |= {("params", key) + p for p in parsed.quoted}
    remember_source(COMMAND_LINE, "\n".join(lines))  # parsing a value above remembered only that value
    if problems:
        raise SpecError([d for p in problems for d in p.diagnostics])
    out.data["params"] = new_params
    return out
