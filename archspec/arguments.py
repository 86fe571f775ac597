"""The spec a command line names and its --set overrides, read from parsed arguments: shared by
the `archspec` commands (cli/commands/) and `python -m archspec.train`, which import this
module rather than each other."""

from __future__ import annotations

import os
import sys

from .core.errors import UsageError
from .language.compose import parse_override


def overrides_of(args) -> dict[str, str] | None:
    result = {}
    for text in args.overrides:
        try:
            key, value = parse_override(text)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        result[key] = value
    return result or None


def spec_path(args, announce: bool = True) -> str:
    """The spec file SPEC names: a path, or else a shipped spec's name (archspec/models.py),
    which the command says on stderr (with `announce`); a usage error naming the closest
    shipped names when it is neither."""
    if os.path.isfile(args.spec):  # a file at that path is the spec (resolve_spec's first rule), no lookup
        return args.spec
    from .models import not_found, resolve_spec, shipped_line  # the shipped names: only for a name

    found = resolve_spec(args.spec)
    if found is None:
        raise UsageError(not_found(args.spec, "`archspec models`"))
    path, shipped = found
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give a spec file")
    if shipped and announce:
        print(shipped_line(args.spec, path), file=sys.stderr)
    return path
