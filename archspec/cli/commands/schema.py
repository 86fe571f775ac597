"""`archspec schema [SPEC]`: the JSON Schema of the spec format, for editors; given a spec, the
schema of that spec (its nodes may use only its own blocks, with their parameters)."""

from __future__ import annotations

import json

NAME = "schema"
HELP = "print the JSON Schema of the spec format (for editors); with SPEC, one that knows SPEC's blocks"


def add_arguments(parser) -> None:
    parser.add_argument("spec", metavar="SPEC", nargs="?", help="a spec whose blocks the schema should know")


def run(args) -> int:
    from ...language.schema_json import spec_json_schema

    doc = None
    if args.spec is not None:
        from ...language.compose import compose
        from ...language.loader import load_file
        from .common import spec_path

        doc = compose(load_file(spec_path(args)))
    print(json.dumps(spec_json_schema(doc), indent=2))
    return 0
