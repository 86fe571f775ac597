"""README's list of shipped models is `archspec models`' (issue 39: six were missing), and the
examples go by name (`archspec check tiny_lm`), with tiny_lm's length range following --set context."""

from __future__ import annotations

import re

import archspec
from archspec.core.shipped import shipped_names
from archspec.models import resolve_spec

from tests.conftest import ROOT


def test_readme_lists_every_shipped_model():
    text = (ROOT / "README.md").read_text()
    start = text.index("The shipped models:")
    listed = set(re.findall(r"[a-z][a-z0-9_]*", text[start:text.index("\n\n", start)]))
    assert set(shipped_names()) - listed == set()
    assert len(text.splitlines()) < 600


def test_an_example_goes_by_name_and_its_length_follows_the_context():
    path, _ = resolve_spec("tiny_lm")
    assert path.endswith("specs/examples/tiny_lm.yaml")
    report = archspec.check("tiny_lm", overrides={"context": 128})
    assert report.graph.dims["L"].hi == 128
