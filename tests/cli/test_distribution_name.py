"""The distribution's name (issue 39): PyPI's `archspec` is Spack's CPU-architecture library, so
this project installs as `archspec-compiler` (import name and command still `archspec`), and
every install hint names that distribution."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import ROOT

NAME = "archspec-compiler"


def test_the_project_is_named_apart_from_spacks_archspec():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == NAME
    assert project["scripts"]["archspec"] == "archspec.cli:run"


def test_every_install_hint_names_the_distribution():
    stale = []
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
             *(p for folder in ("archspec", "compiler", "specs") for p in (ROOT / folder).rglob("*")
               if p.suffix in (".py", ".md", ".yaml"))]
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"""(?<![\w.-])['"]?archspec\[""", line):
                stale.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not stale, "\n".join(stale)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"pip install '{NAME}[train]'" in readme and "Spack" in readme
