"""`archspec models [PATTERN]`: the shipped specs, by name, with their parameter count, their
inputs, the paper and the reference implementation each is the same network as (from the
spec's header comment). Any command that takes a spec takes one of these names (`archspec
check swin_t`), as do archspec.check, build and create_model. Each is checked to count its
parameters: about half a second for all of them."""

from __future__ import annotations

import json

from ...core.errors import UsageError

NAME = "models"
HELP = "list the shipped specs by name (a command's SPEC may be one of these names)"


def add_arguments(parser) -> None:
    parser.add_argument("pattern", metavar="PATTERN", nargs="?", default="*",
                        help="shell-style pattern of the names to list, e.g. 'swin*' (default: all)")
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args) -> int:
    from ...core.shipped import closest_names, shipped_folder
    from ...models import alternatives, describe, list_models

    names = list_models(args.pattern)
    if not names:
        close = closest_names(args.pattern.strip("*?[]"))
        hint = f"; did you mean {alternatives(close)}?" if close else ""
        raise UsageError(f"no shipped spec matches {args.pattern!r}{hint} (`archspec models` lists them all, from "
                         f"{shipped_folder()})")
    infos = [describe(name) for name in names]
    if args.json:
        print(json.dumps([info.record() for info in infos], indent=2))
        return 0
    print(table(infos))
    return 0


def table(infos: list) -> str:
    """One row per spec: name, params, inputs, paper, reference implementation."""
    head = ("name", "params", "inputs", "paper", "same network as")
    rows = [(i.name, f"{i.params:,}" if i.params is not None else "error", i.inputs or (i.error or ""),
             i.paper or "-", i.same_as or "-") for i in infos]
    widths = [max(len(row[k]) for row in [head] + rows) for k in range(len(head))]
    align = ["<", ">", "<", "<", "<"]

    def line(row) -> str:
        return "  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, align, widths)).rstrip()

    return "\n".join([line(head), *map(line, rows)])
