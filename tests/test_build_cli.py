"""`archspec build` end to end: artifacts, weights, failures located at spec nodes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import archspec
from archspec.cli.progress import located_failure
from archspec.compiler.backends.batch import BatchRange

from .conftest import ROOT, perturb_constants

SMALL = str(ROOT / "specs" / "vit_b16.yaml")
SHRINK = ["--set", "depth=2", "--set", "dim=64", "--set", "heads=2", "--set", "img=64"]


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "archspec", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def test_build_writes_artifacts_and_the_program_runs_at_any_batch(tmp_path):
    result = run_cli("build", SMALL, *SHRINK, "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "[4/4] torch.export" in result.stderr  # progress is shown
    for name in ("model.pt2", "model.py", "weights.pt", "report.json"):
        assert (tmp_path / name).is_file(), name
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["name"] == "vit_b16" and report["outputs"]["output"] == ["B", 1000]
    program = torch.export.load(tmp_path / "model.pt2")  # (reloading without archspec: test_lowering.py)
    eager = archspec.build(SMALL, overrides={"depth": 2, "dim": 64, "heads": 2, "img": 64}, seed=0).eval()
    for batch in (1, 4):
        x = torch.randn(batch, 3, 64, 64)
        with torch.no_grad():
            assert torch.allclose(program.module()(x), eager(x), atol=1e-5)


def test_build_refuses_a_bad_spec_with_the_checker_diagnostics(tmp_path):
    bad = ROOT / "specs" / "swin_t.yaml"  # in place: its weight mapping is found beside it
    result = run_cli("build", str(bad), "--set", "img=240", "-o", str(tmp_path / "out"))
    check = run_cli("check", str(bad), "--set", "img=240")
    assert result.returncode == check.returncode == 1
    assert "window 7 does not divide the 60x60 token grid" in result.stderr
    assert result.stderr.splitlines()[-2:] == check.stderr.splitlines()[-2:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_weights_in_reference_naming_give_the_reference_outputs(tmp_path):
    timm = pytest.importorskip("timm")
    reference = timm.create_model("vit_base_patch16_224", pretrained=False, depth=2, embed_dim=64, num_heads=2,
                                  img_size=64).eval()
    perturb_constants(reference)  # LayerNorms and biases away from 1 and 0, so a swapped one shows
    torch.save(reference.state_dict(), tmp_path / "timm.pth")
    result = run_cli("build", SMALL, *SHRINK, "--target", "eager", "--weights", str(tmp_path / "timm.pth"),
                     "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "timm vit naming" in result.stderr
    model = archspec.build(SMALL, overrides={"depth": 2, "dim": 64, "heads": 2, "img": 64})
    model.load_state_dict(torch.load(tmp_path / "out" / "weights.pt", weights_only=True))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(model.eval()(x), reference(x), atol=1e-5)


def test_weights_that_do_not_fit_name_the_tensors(tmp_path):
    state = archspec.build(SMALL, overrides={"depth": 2, "dim": 64, "heads": 2, "img": 64}).state_dict()
    state["blocks.1.mlp.fc1.weight"] = torch.zeros(3, 3)
    del state["head.fc.bias"]
    torch.save(state, tmp_path / "w.pt")
    result = run_cli("build", SMALL, *SHRINK, "--target", "eager", "--weights", str(tmp_path / "w.pt"),
                     "-o", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "head.fc.bias" in result.stderr and "blocks.1.mlp.fc1.weight (3, 3)" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_backend_failure_is_located_at_the_spec_node():
    report = archspec.check(SMALL)
    try:
        raise ValueError('Cannot view a tensor\nOriginal traceback:\n  File "specs/vit_b16.yaml", line 40, '
                         'in blocks.3.attn\n')
    except ValueError as exc:
        failure = located_failure(exc, report.graph, "ONNX")
    assert failure.path == "blocks.3.attn"
    assert failure.loc.file.endswith("vit_b16.yaml") and failure.loc.line == report.graph.node("blocks.3.attn").loc.line
    assert failure.message.startswith("ONNX failed: ValueError: Cannot view a tensor")
    assert isinstance(failure, archspec.InternalError)  # a bug: the CLI exits with 3


@pytest.mark.parametrize("text, expected", [(None, (1, 8, 64)), ("4", (4, 4, 4)), ("1:8:32", (1, 8, 32))])
def test_parse_batch(text, expected):
    batch = BatchRange.parse(text)
    assert (batch.min, batch.opt, batch.max) == expected


@pytest.mark.parametrize("text", ["0", "8:4:16", "a", "1:2"])
def test_parse_batch_refuses(text):
    with pytest.raises(ValueError):
        BatchRange.parse(text)
