"""A size hint at a number written in place (issue 39: `heads: 5` in a spec with rotary_grid was
hinted 6, 8, ..., 64, and 64 then fails: the rotary head width must be a multiple of 4): the
values it names are checked against the whole spec, written where the 5 was."""

from __future__ import annotations

import pytest

import archspec
from archspec.core.suggestions import Divides

from tests.conftest import ROOT

EVA = (ROOT / "specs" / "eva02_ti14.yaml").read_text()


def test_a_literal_gets_only_values_that_pass_the_whole_spec():
    text = EVA.replace("heads: ${heads}", "heads: 5")
    assert text != EVA
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    advice = info.value.diagnostics[0].suggestion.advice
    assert isinstance(advice, Divides) and advice.passing  # checked values, not the bare divisors
    assert 64 not in advice.passing and "passes the whole spec" in info.value.diagnostics[0].hint
    for heads in advice.passing:
        assert archspec.check_text(EVA.replace("heads: ${heads}", f"heads: {heads}")).params > 0


def test_a_size_error_in_an_extending_spec_points_at_the_value_it_wrote(tmp_path):
    """vit_ti16 writes heads: 5; vit_b16 reads it as ${heads}: the error is at vit_ti16's line."""
    text = (ROOT / "specs" / "vit_ti16.yaml").read_text().replace("heads: 3", "heads: 5")
    path = tmp_path / "vit_ti16.yaml"
    path.write_text(text)
    with pytest.raises(archspec.SpecError) as info:
        archspec.check(str(path))
    d = info.value.diagnostics[0]
    assert d.loc.file == str(path) and d.loc.line == text.splitlines().index("  heads: 5") + 1
    assert "5 heads do not divide the width 192" in d.message and "read as ${heads} at vit_b16.yaml:" in d.message
