"""Targets as discovered objects (compiler/backends/targets/): a new one is one file, `archspec
targets` tells the truth about each, and a precision that does not fit a target is refused with
the words it always had."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from importlib.metadata import version

import pytest
import torch

from archspec.cli.main import main
from archspec.compiler.backends import precision as precision_rules
from archspec.compiler.backends import targets

from tests.conftest import ROOT

SMALL = str(ROOT / "specs" / "vit_b16.yaml")
SHRINK = ["--set", "depth=2", "--set", "dim=64", "--set", "heads=2", "--set", "img=64"]

TOY = '''
"""toy: a text file with the graph's name (a target written for a test)."""

from archspec.compiler.backends.targets import register
from archspec.compiler.backends.targets.base import Target


class Toy(Target):
    name = "toy"
    doc = "a text file with the graph's name"
    artifacts = "+ toy.txt"
    commands = ("build",)
    build_precisions = ("fp32",)
    runs_model = False

    def steps(self, precision):
        return 1

    def build(self, context):
        path = context.path("toy.txt")

        def write():
            with open(path, "w") as f:
                f.write(context.graph.name)

        context.progress.run("toy -> toy.txt", write)
        context.written.append(path)


register(Toy())
'''


@pytest.fixture
def toy_target(tmp_path, monkeypatch):
    """A folder holding toy.py, seen by discovery beside the built-in targets."""
    folder = tmp_path / "more_targets"
    folder.mkdir()
    (folder / "toy.py").write_text(textwrap.dedent(TOY))
    monkeypatch.setattr(targets, "__path__", [*targets.__path__, str(folder)])
    targets.reset()
    yield
    monkeypatch.undo()
    targets.reset()  # the built-ins alone again


def test_a_new_target_is_one_file_that_targets_lists_and_build_runs(toy_target, tmp_path, capsys):
    assert main(["targets", "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert listed["toy"]["commands"] == ["build"] and listed["toy"]["usable"]
    assert {"eager", "export", "onnx", "tensorrt"} <= set(listed)

    out = tmp_path / "out"
    assert main(["build", SMALL, *SHRINK, "--target", "toy", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "[4/4] toy -> toy.txt" in err, err
    assert (out / "toy.txt").read_text() == json.loads((out / "report.json").read_text())["name"]
    assert "toy.txt" in json.loads((out / "manifest.json").read_text())["files"]
    assert not (out / "model.pt2").exists()  # the toy needs no export


def test_an_installed_package_adds_a_target_through_its_entry_point(tmp_path, monkeypatch):
    import importlib.metadata

    (tmp_path / "toy_target_plugin.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    point = importlib.metadata.EntryPoint("toy", "toy_target_plugin", targets.GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [point] if group == targets.GROUP else [])
    targets.reset()
    try:
        assert "toy" not in [t.name for t in targets.builtins("build")]  # plugins are looked for when asked
        assert targets.get("toy").doc == "a text file with the graph's name"
        assert "toy" in targets.TargetChoices("build") and "toy" not in targets.TargetChoices("bench")
    finally:
        monkeypatch.undo()
        targets.reset()


def test_a_target_is_registered_once():
    targets.load_builtins()
    with pytest.raises(targets.TargetRegistryError, match="registered twice"):
        targets.register(targets.get("onnx"))


def test_a_target_builds_after_what_it_needs():
    assert [t.name for t in targets.chain(targets.get("tensorrt"))] == ["export", "tensorrt"]
    assert [t.name for t in targets.chain(targets.get("eager"))] == ["eager"]


def installed(*packages: str) -> bool:
    return all(importlib.util.find_spec(p) is not None for p in packages)


def tensorrt_imports() -> bool:
    from archspec.compiler.backends.tensorrt import load_torch_tensorrt
    from archspec.core.errors import SpecError

    try:
        load_torch_tensorrt()
    except SpecError:
        return False
    return True


def test_targets_json_says_honestly_what_is_usable_here(capsys):
    assert main(["targets", "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert list(listed) == ["eager", "compile", "cudagraphs", "export", "onnx", "aoti", "tensorrt"]
    assert listed["cudagraphs"]["usable"] == torch.cuda.is_available() and listed["cudagraphs"]["commands"] == ["bench"]
    if not torch.cuda.is_available():
        assert "no CUDA GPU" in listed["cudagraphs"]["reason"]
    assert listed["eager"]["usable"] and listed["eager"]["version"] == f"torch {version('torch')}"
    assert listed["onnx"]["usable"] == installed("onnx", "onnxscript", "onnxruntime")
    gpu_and_trt = installed("torch_tensorrt") and torch.cuda.is_available() and tensorrt_imports()
    assert listed["tensorrt"]["usable"] == gpu_and_trt
    if not gpu_and_trt:
        assert "GPU" in listed["tensorrt"]["reason"] or "not installed" in listed["tensorrt"]["reason"]
    assert listed["compile"]["commands"] == ["bench"] and listed["tensorrt"]["commands"] == ["build", "bench", "check"]
    assert listed["onnx"]["build_precisions"] == ["fp32", "int8"] and listed["onnx"]["needs"] == ["export"]
    assert listed["aoti"]["build_precisions"] == ["fp32", "bf16"] and listed["aoti"]["needs"] == ["export"]
    assert listed["eager"]["bench_precisions"] == ["fp32", "bf16", "fp16"]


def test_targets_table_has_a_line_per_target_and_why_one_is_not_usable(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    for name in ("eager", "compile", "export", "onnx", "aoti", "tensorrt"):
        assert any(line.startswith(name) for line in out.splitlines()), out
    assert ("why not:" in out) == (not all(t.availability().usable for t in targets.targets()))


ONNX_NO = "ONNX Runtime's CPU provider has no {p} kernels for MatMul and Add; {p} ONNX needs a GPU provider (CUDA, TensorRT)"
INT8_NO = "int8 is ONNX Runtime's dynamic quantization of the linear layers: use --target onnx"
FP16_NO = "fp16 runs on CUDA; on a CPU use bf16 (AVX512-BF16 / AMX)"
BF16_CPU_NO = "this CPU has no bf16 instructions (AVX512-BF16 or AMX): bf16 would be emulated and slow"
BF16_EXPORT_NO = ("a bf16 model.pt2 is not built yet: build --target eager --precision bf16 for the bf16 module, "
                  "or time it with `archspec bench SPEC --precision bf16`")


@pytest.mark.parametrize("target, precision, says", [
    ("eager", "fp16", FP16_NO),
    ("eager", "int8", INT8_NO),
    ("eager", "bf16", BF16_CPU_NO),  # on a CPU without bf16 (made so below)
    ("export", "bf16", BF16_EXPORT_NO),
    ("export", "fp16", FP16_NO),
    ("export", "int8", INT8_NO),
    ("onnx", "bf16", ONNX_NO.format(p="bf16")),
    ("onnx", "fp16", ONNX_NO.format(p="fp16")),
    ("tensorrt", "bf16", "TensorRT builds fp32 or fp16 engines, not bf16"),
    ("tensorrt", "int8", "TensorRT builds fp32 or fp16 engines, not int8"),
])
def test_a_precision_that_does_not_fit_the_target_says_what_it_always_said(target, precision, says, tmp_path,
                                                                             monkeypatch, capsys):
    monkeypatch.setattr(precision_rules, "cpu_has_bf16", lambda: False)
    code = main(["build", SMALL, "--target", target, "--precision", precision, "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"archspec build: error: --precision {precision} with --target {target}: {says}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target, precision, device, says", [
    ("compile", "fp16", "cpu", FP16_NO),
    ("compile", "int8", "cpu", INT8_NO),
    ("onnx", "bf16", "cpu", ONNX_NO.format(p="bf16")),
    ("tensorrt", "int8", "cuda", "TensorRT builds fp32 or fp16 engines, not int8"),
    ("eager", "fp8", "cpu", "unknown precision 'fp8' (fp32, bf16, fp16 or int8)"),
])
def test_precisions_that_do_not_run_at_a_target_say_why(target, precision, device, says):
    assert precision_rules.unsupported(precision, target, device) == says
