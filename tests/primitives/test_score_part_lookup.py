"""A spec's score parts are found by name without importing every part (check stays quick): a
built-in part lives in the file named after it, and an unknown name still lists every part. The
kinds whose kernel only adds a bias refuse a part that rewrites the scores, in one check
(scores/base.py: check_bias_parts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from archspec.primitives.ops.attention.scores import base


def test_every_built_in_part_lives_in_the_file_named_after_it():
    for name, part in base.known_parts().items():
        module = type(part).__module__
        if module.startswith(base.__package__ + "."):
            assert module == f"{base.__package__}.{name}", f"score part {name!r} is defined in {module}"


def test_a_spec_imports_only_the_parts_it_names():
    probe = ("import sys; from archspec.primitives.ops.attention.scores.base import parse_scores, __package__ as p; "
             "parse_scores(['softcap']); "
             "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith(p + '.') and m != p + '.base'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['softcap']"


def test_an_unknown_part_lists_every_part():
    from archspec.primitives.base import RuleError

    with pytest.raises(RuleError) as raised:
        base.parse_scores(["relative_tabel"])
    assert "unknown score part 'relative_tabel'" in str(raised.value)
    assert all(name in raised.value.suggestion.text() for name in base.known_parts())


@pytest.mark.parametrize("attention, hint", [
    ("{kind: window, heads: 2, window: 4, scores: [talking_heads]}",
     "use a bias part (decomposed) here, or the part on global attention"),
    ("{kind: shifted, heads: 2, window: 4, scores: [talking_heads]}",
     "use a bias part (decomposed) here, or the part on global attention"),
    ("{kind: pooled, heads: 2, kernel: 3, stride_q: 1, stride_kv: 2, scores: [talking_heads]}",
     "use a bias part (decomposed) here"),
])
def test_kinds_that_only_add_a_bias_refuse_a_part_that_rewrites_the_scores(attention, hint):
    import archspec
    from archspec.core.errors import SpecError

    text = ("archspec: 1\nname: t\ninputs:\n  x: {shape: [B, 64, 32], grid: [8, 8]}\ngraph:\n"
            f"  - {{id: attn, attention: {attention}}}\n")
    with pytest.raises(SpecError) as raised:
        archspec.check_text(text)
    problem = raised.value.diagnostics[0]
    kind = attention.split(",")[0].split(": ")[1]
    assert problem.message == (f"{kind} attention takes score parts that add a bias, and talking_heads "
                               "changes the scores themselves")
    assert problem.hint == hint and problem.loc.line == 6
