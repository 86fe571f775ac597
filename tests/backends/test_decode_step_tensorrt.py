"""`archspec check SPEC --target tensorrt` of a decoder-only spec that generates also checks
the decode programs `build` ships (the prefill and the single-token decode step, the KV cache
in and out): every op converts, and one that would fall back is located at the spec."""

from __future__ import annotations

import importlib.util
import json

import pytest

import archspec
from archspec.cli import main

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None,
                                reason="torch-tensorrt is not installed "
                                       "(pip install 'archspec-compiler[tensorrt-rtx]')")

TINY_LM = str(ROOT / "specs" / "examples" / "tiny_lm.yaml")
SMALL = {"vocab": 97, "dim": 32, "depth": 2, "heads": 2}
SETS = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]


def test_check_target_tensorrt_reports_the_decode_programs_of_a_spec_that_generates(capsys):
    assert main(["check", TINY_LM, *SETS, "--target", "tensorrt", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["tensorrt"]
    programs = report["decode_programs"]
    assert set(programs) == {"prefill", "decode_step"}
    for program in programs.values():
        assert program["complete"] and program["ops"] == program["converted"] > 0
        assert program["batch"]["max"] > report["batch"]["max"]  # their own batch range: 1:2:1024


def test_a_decode_step_op_that_falls_back_is_located_at_the_spec(monkeypatch):
    from archspec.compiler.backends.tensorrt import coverage

    # the step's cache append (torch.cat of past and new keys) is not in the model's own graph
    pretend = ("aten.cat.default", lambda node: True, "pretended not to convert")
    monkeypatch.setattr(coverage, "_KNOWN_FAILURES", [*coverage._KNOWN_FAILURES, pretend])
    graph = archspec.check(TINY_LM, SMALL).graph
    report = coverage.coverage_report(graph)
    assert not report.complete and [p.program for p in report.parts] == ["prefill", "decode step"]
    step = report.parts[1]
    assert step.fallbacks and {f.path for f in step.fallbacks} <= {"blocks.0.attn", "blocks.1.attn"}
    assert all(f.loc is not None and f.loc.file.endswith("tiny_lm.yaml") for f in step.fallbacks)
    text = report.summary()  # what check prints
    assert "  prefill (batch 1:2:1024, prompt length dynamic): " in text
    assert "  decode step (batch 1:2:1024, cache length dynamic): " in text
    assert "tiny_lm.yaml:" in text.split("decode step (")[1]  # its fallbacks, located, under its line
    messages = [d.message for d in report.diagnostics()]
    assert any("in the decode step (decode_step.pt2)" in m for m in messages)
