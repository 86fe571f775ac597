"""`archspec targets`: every target (built-in or from an installed plugin), whether it can be
used on this machine and why not, the version of the package it runs on, the precisions it
gives for build and for bench, and the commands it serves.

    archspec targets
    archspec targets --json
"""

from __future__ import annotations

import json

NAME = "targets"
HELP = "list the targets (backends): usable here or why not, versions, precisions, commands"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the targets as JSON")


def record(target) -> dict:
    """One target as JSON (availability asked now: packages looked for, a GPU looked for)."""
    available = target.availability()
    return {"name": target.name, "doc": target.doc, **available.to_json(), "commands": list(target.commands),
            "build_precisions": list(target.build_precisions), "bench_precisions": list(target.bench_precisions),
            "needs": list(target.needs)}


def table(records: list[dict]) -> str:
    """A line per target, and under it what it is and, when it cannot be used here, why."""
    width = max(len(r["name"]) for r in records)
    lines = []
    for r in records:
        usable = "usable" if r["usable"] else "not usable"
        build = " ".join(r["build_precisions"]) or "-"
        bench = " ".join(r["bench_precisions"]) or "-"
        lines.append(f"{r['name']:{width}}  {usable:10}  {r['version'] or '-'}; build: {build}; bench: {bench}; "
                     f"serves {', '.join(r['commands'])}")
        lines.append(f"{'':{width}}  {r['doc']}")
        if r["reason"]:
            lines.append(f"{'':{width}}  why not: {r['reason']}")
    return "\n".join(lines)


def run(args) -> int:
    from ...compiler.backends import targets

    records = [record(t) for t in targets.targets()]
    print(json.dumps(records, indent=2) if args.json else table(records))
    return 0
