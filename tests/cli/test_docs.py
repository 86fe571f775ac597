"""The reference stays whole: every registered primitive, kind and target is named in the docs
(a new op or backend without a word in specs/README.md or README.md fails here)."""

from __future__ import annotations

import pytest

from archspec.compiler.backends import targets
from archspec.primitives import registry

from tests.conftest import ROOT

SPEC_REFERENCE = (ROOT / "specs" / "README.md").read_text()
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize("op", [o for o in registry.ops() if o.plugin is None], ids=lambda o: o.label)
def test_every_op_and_kind_is_in_the_spec_reference(op):
    assert f"`{op.primitive}`" in SPEC_REFERENCE, f"specs/README.md does not name the primitive {op.primitive}"
    if op.kind is not None:
        assert f"`{op.kind}`" in SPEC_REFERENCE, f"specs/README.md does not name the kind {op.label}"


def test_every_target_is_in_the_readme():
    missing = [t.name for t in targets.targets() if f"`{t.name}`" not in README]
    assert not missing, f"README.md does not name the targets {missing}"


def _first_steps_blocks() -> tuple[str, list[tuple[str, str]]]:
    """The spec of README's "First steps" and each `$ archspec ...` block with its printed text."""
    section = README.split("## First steps", 1)[1].split("\n## ", 1)[0]
    spec = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    runs = []
    for block in section.split("```\n$ ")[1:]:
        command, printed = block.split("```", 1)[0].split("\n", 1)
        runs.append((command, printed))
    return spec, runs


def test_the_first_steps_print_what_the_readme_shows(tmp_path, capsys, monkeypatch):
    """README's first example is real: its spec checks as shown, its error is the one shown."""
    from archspec.cli import main

    spec, runs = _first_steps_blocks()
    (tmp_path / "my_vit.yaml").write_text(spec)
    monkeypatch.chdir(tmp_path)
    assert len(runs) == 2
    codes = []
    for command, printed in runs:
        codes.append(main(command.split()[1:]))
        out = capsys.readouterr()
        assert (out.out + out.err).strip() == printed.strip(), command
    assert codes == [0, 1]  # the spec checks; the size it does not fit is an error
