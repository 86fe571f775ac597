"""Shared fixtures: the shipped specs, and one built model per spec reused by a test class."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.yaml"))
ALL_SPECS = SPECS + EXAMPLES


def spec_id(path: Path) -> str:
    return path.stem if path.parent.name == "specs" else f"examples/{path.stem}"


@functools.lru_cache(maxsize=1)
def built(path: str):
    """(report, GraphModule) of a spec, built once per spec (the last one is cached)."""
    import archspec
    from compiler.lower import lower

    report = archspec.check(path)
    return report, lower(report.graph, seed=0)


@pytest.fixture(scope="class", params=ALL_SPECS, ids=spec_id)
def spec_path(request) -> str:
    return str(request.param)
