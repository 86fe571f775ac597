"""The package says it is typed (PEP 561): archspec/py.typed, shipped as package data."""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT


def test_the_package_carries_py_typed():
    assert (ROOT / "archspec" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["archspec"]
