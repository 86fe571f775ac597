"""archspec/primitives/op_index.py (which module registers each built-in primitive and kind, so
that checking a spec imports the rules of its own ops alone) is what discovery finds: a new,
renamed or moved op file fails here until `python -m archspec.primitives.registry` rewrites it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

INDEX = ROOT / "archspec" / "primitives" / "op_index.py"


def _fresh(code: str) -> str:
    """`code`'s output in a new interpreter: no op registered by another test, nothing loaded yet."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_op_index_is_what_discovery_finds():
    expected = _fresh("import sys; from archspec.primitives.registry import index_source; "
                      "sys.stdout.write(index_source())")
    assert INDEX.read_text(encoding="utf-8") == expected, (
        "archspec/primitives/op_index.py is out of date: run `python -m archspec.primitives.registry`")


def test_a_question_about_one_op_imports_that_op_alone():
    out = _fresh("import sys\n"
                 "from archspec.primitives import registry\n"
                 "names = registry.primitives()\n"
                 "assert 'attention' in names and registry.kinds('attention') and registry.has_kinds('norm')\n"
                 "print(registry.default_kind('norm'), registry.op('attention', 'window').label)\n"
                 "print(sorted(m.rpartition('.ops.')[2] for m in sys.modules if '.primitives.ops.' in m))\n")
    default, loaded = out.splitlines()
    assert default == "layer attention/window"
    assert "attention.window" in loaded and "mlp" not in loaded and "attention.alibi" not in loaded, loaded
