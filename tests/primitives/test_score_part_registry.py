"""Score parts live in the op registry (one registry): under the family `attention.scores`, keyed
by their name, each an object that facts are registered against. The family is no primitive:
a node cannot name it, and the listings of primitives and ops leave it out."""

from __future__ import annotations

import pytest

import archspec
from archspec.core.errors import SpecError
from archspec.primitives import registry
from archspec.primitives.ops.attention.scores.base import SCORES, ScorePart, known_parts, part_named


def test_every_score_part_is_in_the_registry_under_its_name():
    found = registry.parts(SCORES)
    assert found and found == known_parts()
    for name, part in found.items():
        assert isinstance(part, ScorePart) and part.name == name and part.kind == name
        assert registry.op(SCORES, name) is part and part_named(name) is part
        assert part.plugin is None  # the built-in ones


def test_the_family_of_parts_is_no_primitive():
    assert SCORES not in registry.primitives()
    assert all(not isinstance(o, ScorePart) for o in registry.ops())
    text = "archspec: 1\nname: t\ninputs:\n  x: {shape: [B, 16, 32]}\ngraph:\n  - {id: s, attention.scores: {}}\n"
    with pytest.raises(SpecError) as raised:
        archspec.check_text(text)
    assert "attention.scores" in str(raised.value) and raised.value.diagnostics[0].loc.line == 6


def test_a_part_registered_twice_is_an_error():
    from archspec.primitives.ops.attention.scores.softcap import SoftcapPart

    with pytest.raises(registry.RegistryError, match="registered twice"):
        registry.register(SoftcapPart())


def test_every_score_part_has_its_torch_module_registered_against_it():
    from archspec.compiler.modules.attention.scores.base import SCORE_MODULE

    for part in known_parts().values():
        assert callable(SCORE_MODULE.of(part)), part


def test_an_unknown_name_is_no_part():
    assert part_named("no_such_part") is None and part_named(3) is None
