"""The reference stays whole: every registered primitive, kind and target is named in the docs
(a new op or backend without a word in specs/README.md or README.md fails here)."""

from __future__ import annotations

import pytest

from archspec.compiler.backends import targets
from archspec.primitives import registry

from .conftest import ROOT

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
