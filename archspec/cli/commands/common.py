"""Arguments several commands share: the spec, its --set overrides, sizes and seeds."""

from __future__ import annotations

import os

from ... import SEED_MAX
from ...core.errors import UsageError
from ...language.compose import parse_override


def add_spec_arguments(parser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="path of a YAML spec")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a param (repeatable), e.g. --set img=256 --set depths=[2,2,18,2]")


def overrides_of(args) -> dict[str, str] | None:
    result = {}
    for text in args.overrides:
        try:
            key, value = parse_override(text)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        result[key] = value
    return result or None


def spec_path(args) -> str:
    path = args.spec
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give a spec file")
    return path


def size_range(text: str, option: str) -> tuple[int, int]:
    """MIN:MAX of square input sizes (`check --sizes`, `build --size`)."""
    from ...sizes import LARGEST_SIZE

    lo, sep, hi = text.partition(":")
    try:
        bounds = (int(lo), int(hi)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or not 1 <= bounds[0] <= bounds[1] <= LARGEST_SIZE:
        raise UsageError(f"{option} takes MIN:MAX with 1 <= MIN <= MAX <= {LARGEST_SIZE}, got {text!r}")
    return bounds


def checked_seed(seed: int) -> int:
    """--seed: torch.manual_seed's range, or a usage error."""
    if not 0 <= seed <= SEED_MAX:
        raise UsageError(f"--seed must be a whole number from 0 to {SEED_MAX} (2^64 - 1), got {seed}")
    return seed
