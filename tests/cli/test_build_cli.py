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
from archspec.compiler.weights.checkpoint import read_state_dict

from tests.conftest import ROOT, perturb_constants

SMALL = str(ROOT / "specs" / "vit_b16.yaml")
SHRINK = ["--set", "depth=2", "--set", "dim=64", "--set", "heads=2", "--set", "img=64"]


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "archspec", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def test_build_writes_artifacts_and_the_program_runs_at_any_batch(tmp_path):
    result = run_cli("build", SMALL, *SHRINK, "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "[4/4] torch.export" in result.stderr  # progress is shown
    for name in ("model.pt2", "model.py", "model.safetensors", "config.json", "README.md", "report.json"):
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
    model.load_state_dict(read_state_dict(str(tmp_path / "out" / "model.safetensors")))
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


# -- --precision and --size -----------------------------------------------------------------------------


def run_model_py(folder, weights: dict) -> torch.nn.Module:
    """The model class of a build's model.py (the one its docstring imports), made and loaded with
    the build's weights, strictly."""
    import re

    source = (folder / "model.py").read_text()
    namespace: dict = {}
    exec(compile(source, "model.py", "exec"), namespace)  # noqa: S102 - our own output
    module = namespace[re.search(r"from model import (\w+)", source).group(1)]().eval()
    module.load_state_dict(weights, strict=True)
    return module


def test_bf16_build_writes_a_bf16_module_and_its_measured_deviation(tmp_path):
    from archspec.compiler.backends.precision import unsupported

    if unsupported("bf16", "eager") is not None:  # a CPU without AVX512-BF16 or AMX: exit 2, tested below
        pytest.skip(unsupported("bf16", "eager"))
    result = run_cli("build", SMALL, *SHRINK, "--target", "eager", "--precision", "bf16", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    weights = read_state_dict(str(tmp_path / "model.safetensors"))
    assert {t.dtype for t in weights.values() if t.is_floating_point()} == {torch.bfloat16}
    module = run_model_py(tmp_path, weights)  # model.py makes the module in bf16 too
    assert {p.dtype for p in module.parameters()} == {torch.bfloat16}
    deviation = json.loads((tmp_path / "precision.json").read_text())["deviation"]
    assert 0 < deviation["max_abs"] < 0.1 * deviation["scale"]  # measured, and not zero: bf16 rounds
    assert "max |bf16 - fp32|" in result.stderr and "precision.json" in result.stdout


def test_int8_build_adds_a_quantized_onnx_that_runs(tmp_path):
    import onnxruntime

    result = run_cli("build", SMALL, *SHRINK, "--target", "onnx", "--precision", "int8", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    info = json.loads((tmp_path / "precision.json").read_text())
    assert info["files"] == ["model.int8.onnx"] and info["deviation"]["max_abs"] > 0
    session = onnxruntime.InferenceSession(str(tmp_path / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    assert {n.op_type for n in __import__("onnx").load(str(tmp_path / "model.int8.onnx")).graph.node} & {
        "MatMulInteger", "DynamicQuantizeMatMul", "DynamicQuantizeLinear"}
    (out,) = session.run(None, {session.get_inputs()[0].name: torch.randn(2, 3, 64, 64).numpy()})
    assert out.shape == (2, 1000)


@pytest.mark.parametrize("args, says", [
    (["--precision", "int8"], "use --target onnx"),
    (["--precision", "bf16", "--target", "onnx"], "no bf16 kernels"),
    (["--precision", "fp16", "--target", "eager"], "--precision fp16 with --target eager: "),
    (["--size", "32:128", "--target", "onnx"], "--size gives model.pt2 dynamic image sides"),
    (["--size", "128:32"], "--size takes MIN:MAX"),
])
def test_options_that_do_not_fit_the_target_are_usage_errors(tmp_path, args, says):
    result = run_cli("build", SMALL, *SHRINK, *args, "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_size_range_gives_a_program_that_takes_other_image_sizes(tmp_path):
    pvt = str(ROOT / "specs" / "pvt_v2_b0.yaml")
    small = ["--set", "depths=[1,1,1,1]", "--set", "classes=10"]
    result = run_cli("build", pvt, *small, "--size", "160:256", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    program = torch.export.load(tmp_path / "model.pt2").module()
    for size in (160, 192, 256):  # against the eager model built for that size (the same seeded weights)
        eager = archspec.build(pvt, overrides={"depths": "[1,1,1,1]", "classes": "10", "img": str(size)}, seed=0)
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            assert (program(x) - eager.eval()(x)).abs().max() < 1e-4


def test_size_range_that_a_spec_cannot_take_says_so(tmp_path):
    result = run_cli("build", SMALL, *SHRINK, "--size", "32:128", "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "cannot take a dynamic image size" in result.stderr, result.stderr


DEAD_NODE = """archspec: 1
name: warny
inputs:
  image: [B, 3, 32, 32]
graph:
  - patchify: {patch: 16, dim: 32}
  - norm: {}
    id: dead
  - head: {kind: classify, classes: 10}
    from: patchify
"""


def test_build_says_what_check_warns_of_and_small_flops_in_small_units(tmp_path):
    spec = tmp_path / "warny.yaml"
    spec.write_text(DEAD_NODE)
    result = run_cli("build", str(spec), "--target", "eager", "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "warny.yaml:7:5: warning: dead: no output depends on this node" in result.stderr
    assert "25,002 params, 197.25 KFLOPs per sample" in result.stderr  # not "0.00 GFLOPs"


def test_the_export_line_gives_the_gap_relative_to_large_outputs():
    """A user read 1.83e-04 on logits near 900 as a poor export: past 1, the line says the share."""
    from archspec.compiler.backends.targets.export import describe

    assert describe((None, (1.83e-4, 912.0, (0, 100)))) == "max |export - eager| 1.83e-04 (2.0e-07 of max |eager| 912)"
    assert describe((None, (3.0e-7, 0.8, (0, 100)))) == "max |export - eager| 3.00e-07"
