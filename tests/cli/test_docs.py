"""The reference stays whole and true: every registered primitive, kind and target is named in the
docs (a new op or backend without a word in specs/README.md or README.md fails here), and the
option tables of specs/README.md are the ones the code generates (archspec/render/reference.py):
a default, type or description changed in an op's Params and not regenerated fails here."""

from __future__ import annotations

import pytest

from archspec.cli.commands.primitives import describe
from archspec.compiler.backends import targets
from archspec.primitives import registry
from archspec.render import reference

from tests.conftest import ROOT

SPEC_REFERENCE = (ROOT / "specs" / "README.md").read_text()
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize("op", [o for o in registry.ops() if o.plugin is None], ids=lambda o: o.label)
def test_every_op_and_kind_is_in_the_spec_reference(op):
    assert f"`{op.primitive}`" in SPEC_REFERENCE, f"specs/README.md does not name the primitive {op.primitive}"
    if op.kind is not None:
        assert f"`{op.kind}`" in SPEC_REFERENCE, f"specs/README.md does not name the kind {op.label}"


def test_the_reference_tables_are_the_ones_the_code_generates():
    regenerated = reference.splice(SPEC_REFERENCE, describe)
    if regenerated != SPEC_REFERENCE:
        import difflib

        diff = difflib.unified_diff(SPEC_REFERENCE.splitlines(), regenerated.splitlines(), "specs/README.md",
                                    "generated from the code", lineterm="", n=1)
        shown = "\n".join(list(diff)[:60])
        pytest.fail(f"specs/README.md's option tables differ from the ops' Params; regenerate them with "
                    f"`{reference.REGENERATE}` and review the diff:\n{shown}", pytrace=False)


def test_every_primitive_has_one_generated_table():
    builtin = sorted({o.primitive for o in registry.ops() if o.plugin is None})
    covered = reference.covered(SPEC_REFERENCE)
    twice = sorted({n for n in covered if covered.count(n) > 1})
    assert not twice, f"specs/README.md's generated blocks list {twice} more than once"
    missing = [n for n in builtin if n not in covered]
    assert not missing, (f"specs/README.md has no generated table of {missing}: add the primitive's name to the "
                         f"marker of the block of its section, then run `{reference.REGENERATE}`")
    unknown = [n for n in covered if n not in builtin]
    assert not unknown, f"specs/README.md's generated blocks name primitives that do not exist: {unknown}"


def test_a_drifted_default_is_caught():
    """The comparison is real: a table whose default differs from the code is regenerated back."""
    (names, start, end), *_ = reference.blocks(SPEC_REFERENCE)
    block = SPEC_REFERENCE[start:end]
    row = next(line for line in block.splitlines() if line.startswith("| `") and "| required |" not in line)
    cells = row.split(" | ")
    drifted = SPEC_REFERENCE.replace(row, " | ".join(cells[:2] + ["drifted"] + cells[3:]), 1)
    assert drifted != SPEC_REFERENCE and reference.splice(drifted, describe) == SPEC_REFERENCE


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
