"""`archspec primitives [NAME]`: every primitive, its kinds and their options (type, default,
doc), read from the registry the checker uses, so it is never out of date; `--json` too.
`--markdown` prints the reference tables of specs/README.md (archspec/render/reference.py);
`--markdown FILE` rewrites the generated blocks of FILE in place."""

from __future__ import annotations

import json
import typing
from typing import Any

from ...core.errors import UsageError

NAME = "primitives"
HELP = "list every primitive, kind and option with its default and doc"


def add_arguments(parser) -> None:
    parser.add_argument("name", nargs="?", metavar="PRIMITIVE", help="only this primitive (e.g. attention)")
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    parser.add_argument("--markdown", nargs="?", const="-", metavar="FILE",
                        help="print the reference tables as markdown; with FILE (specs/README.md), rewrite "
                             "its generated blocks in place")


def run(args) -> int:
    from ...primitives import registry

    names = registry.primitives()
    if args.name is not None:
        if args.name not in names:
            from ...core.words import did_you_mean

            hint = did_you_mean(args.name, names)
            raise UsageError(f"no primitive '{args.name}'" + (f"; {hint}" if hint else f"; primitives: {', '.join(names)}"))
        names = [args.name]
    if args.markdown is not None:
        return _markdown(args.markdown, names)
    listing = [describe(name) for name in names]
    if args.json:
        print(json.dumps(listing, indent=2))
    else:
        print("\n\n".join(text(p) for p in listing))
    return 0


def _markdown(path: str, names: list[str]) -> int:
    from pathlib import Path

    from ...render import reference

    if path == "-":
        print(reference.markdown([describe(name) for name in names]))
        return 0
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no file '{path}' to rewrite (--markdown FILE: a file holding generated "
                         f"blocks; one primitive's tables: archspec primitives NAME --markdown)")
    text = file.read_text()
    unknown = sorted(set(reference.covered(text)) - set(registry_names()))
    if unknown:
        raise UsageError(f"{path}: the generated blocks name primitives that do not exist: {', '.join(unknown)}")
    new = reference.splice(text, describe)
    if new != text:
        file.write_text(new)
    print(f"{path}: {len(reference.blocks(text))} generated blocks " + ("rewritten" if new != text else "up to date"))
    return 0


def registry_names() -> list[str]:
    from ...primitives import registry

    return registry.primitives()


def describe(primitive: str) -> dict:
    from ...primitives import registry

    kinds = registry.kinds(primitive) if registry.has_kinds(primitive) else [None]
    ops = [registry.op(primitive, kind) for kind in kinds]
    return {"primitive": primitive, "doc": _first_line(ops[0].doc) if kinds == [None] else "",
            "default_kind": registry.default_kind(primitive) if kinds != [None] else None,
            "kinds": [{"kind": op.kind, "doc": _first_line(op.doc), "plugin": op.plugin,
                       "options": [_option(n, f) for n, f in op.Params.model_fields.items() if n != "kind"]}
                      for op in ops],
            "score_parts": _score_parts() if any("scores" in op.Params.model_fields for op in ops) else []}


def _score_parts() -> list[dict]:
    """The parts a `scores:` option takes (archspec/primitives/ops/attention/scores/)."""
    from ...primitives.ops.attention.scores.base import known_parts

    return [{"part": name, "doc": " ".join(part.doc.split("\n\n")[0].split()), "fused": part.fused,
             "options": [_option(n, f) for n, f in part.Params.model_fields.items()]}
            for name, part in sorted(known_parts().items())]


def _first_line(doc: str) -> str:
    """The doc's first sentence or paragraph, on one line (a summary may wrap in the source)."""
    return " ".join(doc.strip().split("\n\n")[0].split()) if doc else ""


def _option(name: str, field) -> dict:
    required = field.is_required()
    return {"name": field.alias or name, "type": type_text(field.annotation, field.metadata), "required": required,
            "default": None if required else _plain(field.get_default(call_default_factory=True)),
            "doc": field.description or ""}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool, type(None), list)) else str(value)


def type_text(annotation, metadata=()) -> str:
    """`int > 0`, `pre | post | res_post | none`, `bool | qv`, `number in [0, 1)`: a type for people."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(str(a).lower() if isinstance(a, bool) else str(a) for a in args)
    if origin is typing.Annotated:
        return type_text(args[0], tuple(metadata) + tuple(args[1:]))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        parts = [type_text(a, metadata if a is not type(None) else ()) for a in args]
        return " | ".join("none" if p == "NoneType" else p for p in parts)
    if origin in (list, tuple):
        return f"list of {type_text(args[0])}" if args and args[0] is not typing.Any else "list"
    base = {int: "int", float: "number", bool: "bool", str: "text"}.get(annotation, getattr(annotation, "__name__",
                                                                                              str(annotation)))
    return base + _bounds(metadata)


def _bounds(metadata) -> str:
    lo = hi = None
    for m in metadata:
        for attr, side in (("gt", "("), ("ge", "[")):
            if getattr(m, attr, None) is not None:
                lo = (side, getattr(m, attr))
        for attr, side in (("lt", ")"), ("le", "]")):
            if getattr(m, attr, None) is not None:
                hi = (side, getattr(m, attr))
    if lo and hi and hi[1] < 1 << 20:
        return f" in {lo[0]}{lo[1]}, {hi[1]}{hi[0]}"
    if lo:
        return f" > {lo[1]}" if lo[0] == "(" else f" >= {lo[1]}"
    return ""


def text(p: dict) -> str:
    head = p["primitive"] + (f": {p['doc']}" if p["doc"] else "")
    if p["kinds"][0]["kind"] is not None:
        names = [k["kind"] + (" (default)" if k["kind"] == p["default_kind"] else "") for k in p["kinds"]]
        head += f"\n  kinds: {', '.join(names)}"
    lines = [head]
    for kind in p["kinds"]:
        indent = "  "
        if kind["kind"] is not None:
            plugin = f" [plugin {kind['plugin']}]" if kind["plugin"] else ""
            lines.append(f"  kind: {kind['kind']}: {kind['doc']}{plugin}")
            indent = "    "
        rows = [(o["name"], o["type"], "required" if o["required"] else _shown(o["default"]), o["doc"])
                for o in kind["options"]]
        widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
        for row in rows:
            lines.append(indent + "  ".join(f"{c:<{w}}" for c, w in zip(row[:3], widths)) + f"  {row[3]}".rstrip())
    for part in p.get("score_parts", []):
        fused = "fused" if part["fused"] else "written out"
        options = ", ".join(f"{o['name']} ({_shown(o['default'])})" for o in part["options"])
        lines.append(f"  score part: {part['part']}: {part['doc']} [{fused}]" + (f"; options: {options}" if options
                                                                                 else ""))
    return "\n".join(line.rstrip() for line in lines)


def _shown(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)
