"""Plugins: an installed package adds a primitive and a kind through entry points, and a
spec that requires it checks and builds; a spec never imports code by itself.

The example plugin (tests/plugins/example) is really installed, with pip, into a folder of
the test's own; the specs run in a fresh interpreter that has that folder on its path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import archspec

from tests.conftest import ROOT, scratch

PLUGIN = ROOT / "tests" / "plugins" / "example"
SPEC = """
name: with_plugin
requires: [example]
inputs:
  x: [B, 6, 16]
graph:
  - id: scaled
    learned_scale: {init: 2.0}
  - id: head
    head: {kind: mean_max, classes: 3}
"""


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    """A folder holding the installed example plugin (its package and its dist-info)."""
    target = scratch(request, tmp_path_factory, "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(PLUGIN)], check=True, capture_output=True, timeout=300)
    assert list(target.glob("archspec_example_plugin-*.dist-info"))
    return target


def run(site, code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(site))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_required_plugin_adds_a_primitive_and_a_kind(site):
    out = run(site, f"""
        import json, torch, archspec
        spec = {SPEC!r}
        report = archspec.check_text(spec)
        model = archspec.build_text(spec).eval()
        x = torch.randn(2, 6, 16)
        y = model(x)
        expected = model.head.fc(torch.cat([(2 * x).mean(1), (2 * x).amax(1)], -1))
        print(json.dumps({{"params": report.params, "built": sum(p.numel() for p in model.parameters()),
                          "ops": [r.op for r in report.nodes], "gap": float((y - expected).abs().max())}}))
    """)
    assert out["ops"] == ["learned_scale", "head/mean_max"]
    assert out["params"] == out["built"] == 1 + (32 * 3 + 3)
    assert out["gap"] < 1e-6


def test_the_command_line_checks_a_spec_that_requires_an_installed_plugin(site, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = dict(os.environ, PYTHONPATH=str(site))
    result = subprocess.run([sys.executable, "-m", "archspec", "check", str(spec)], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "head/mean_max" in result.stdout


def test_a_missing_plugin_is_a_located_error():
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(SPEC.replace("[example]", "[exampel]"))
    diag = info.value.diagnostics[0]
    assert diag.message == "plugin 'exampel' is not installed"
    assert (diag.loc.line, diag.loc.col) == (3, 12)
    assert "archspec.plugins" in diag.hint


def test_without_requires_the_plugin_ops_are_unknown(site):
    out = run(site, f"""
        import json, archspec
        try:
            archspec.check_text({SPEC.replace("requires: [example]", "")!r})
        except archspec.SpecError as exc:
            print(json.dumps({{"message": exc.message}}))
    """)
    assert out["message"] == "unknown op 'learned_scale'"


def test_a_loaded_plugin_op_needs_requires_in_every_spec_that_uses_it(site):
    out = run(site, f"""
        import json, archspec
        archspec.check_text({SPEC!r})  # loads the plugin in this process
        try:
            archspec.check_text({SPEC.replace("requires: [example]", "")!r})
        except archspec.SpecError as exc:
            print(json.dumps({{"message": exc.message, "hint": exc.hint}}))
    """)
    assert out["message"] == "learned_scale comes from the plugin 'example', which this spec does not require"
    assert out["hint"] == "add `requires: [example]` to the spec"
