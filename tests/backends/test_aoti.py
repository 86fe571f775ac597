"""The aoti target (compiler/backends/targets/aoti.py): an AOTInductor package built from the
export, checked against eager, loadable without archspec; and what it says when it cannot
run (no C++ compiler, one that fails, a precision it does not give). The builds and the bench
compile C++ (a one-block ViT at 32x32: 17 s for the fp32 build test on 2 quiet cores with a
cold inductor cache, 37-48 s on shared ones), so they run in the slow tier; the rest runs in
every tier in a few seconds, the failing compiler's test going as far as inductor's call of it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from archspec.cli.main import main
from archspec.compiler.backends import precision as precision_rules
from archspec.compiler.backends import targets
from archspec.compiler.backends.targets import aoti
from archspec.compiler.weights.checkpoint import read_state_dict

from tests.conftest import NO_ARCHSPEC, ROOT

VIT = str(ROOT / "specs" / "vit_ti16.yaml")
TINY = ["--set", "img=32", "--set", "depth=1", "--set", "classes=10"]
NO_COMPILER = (None, "no-such-c++-compiler")


@pytest.fixture
def no_compiler():
    """Inductor's compiler search finds nothing (its own config, patched and put back)."""
    from torch._inductor import config

    with config.patch({"cpp.cxx": NO_COMPILER}):
        yield


def test_aoti_is_a_registered_target_built_after_the_export():
    target = targets.get("aoti")
    assert target.commands == ("build", "bench") and target.needs == ("export",)
    assert target.build_precisions == ("fp32", "bf16") and target.bench_precisions == ("fp32", "bf16")
    assert [t.name for t in targets.chain(target)] == ["export", "aoti"]
    assert "aoti" in targets.TargetChoices("build") and "aoti" in targets.TargetChoices("bench")


def test_targets_says_whether_a_cpp_compiler_is_there(capsys):
    from torch._inductor import config

    assert main(["targets", "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert listed["aoti"]["usable"] == (aoti.cpp_compiler() is not None)
    with config.patch({"cpp.cxx": NO_COMPILER}):
        assert main(["targets", "--json"]) == 0
        listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert not listed["aoti"]["usable"]
    assert "no C++ compiler" in listed["aoti"]["reason"] and "no-such-c++-compiler" in listed["aoti"]["reason"]


def test_build_without_a_cpp_compiler_says_so_before_any_work(no_compiler, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["build", VIT, *TINY, "--target", "aoti", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --target aoti: AOTInductor compiles C++ and finds no C++ compiler here")
    assert "hint: install one" in err and "Traceback" not in err and "[1/" not in err
    assert not out.exists()


def test_bench_without_a_cpp_compiler_is_a_row_that_says_why(no_compiler, capsys):
    assert main(["bench", VIT, *TINY, "--target", "aoti", "--rounds", "1", "--threads", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["target"] == "aoti" and "no C++ compiler" in row["status"]


@pytest.mark.parametrize("precision, says", [
    ("int8", "int8 is ONNX Runtime's dynamic quantization of the linear layers: use --target onnx"),
    ("fp16", "--target aoti gives fp32 or bf16 (fp16 on a CUDA GPU: --target tensorrt)"),
    ("bf16", "this CPU has no bf16 instructions (AVX512-BF16 or AMX): bf16 would be emulated and slow"),
])
def test_a_precision_aoti_does_not_give_here_is_refused_plainly(precision, says, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(precision_rules, "cpu_has_bf16", lambda: False)
    code = main(["build", VIT, "--target", "aoti", "--precision", precision, "-o", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"archspec build: error: --precision {precision} with --target aoti: {says}"
    assert precision_rules.unsupported(precision, "aoti", "cpu") == says


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_device_cuda_without_a_gpu_is_a_usage_error_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["build", VIT, *TINY, "--target", "aoti", "--device", "cuda", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("archspec build: error: --device cuda: torch sees no CUDA GPU on this machine (torch ")
    assert not out.exists()


@pytest.mark.parametrize("target", ["export", "onnx", "tensorrt"])
def test_device_cuda_with_another_target_names_the_one_that_compiles_for_the_gpu(target, tmp_path, capsys):
    assert main(["build", VIT, *TINY, "--target", target, "--device", "cuda", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"archspec build: error: --device cuda: --target {target} takes no --device; --target aoti "
                   "compiles for the GPU (--target tensorrt builds on the GPU it finds by itself)")


def test_the_bf16_step_says_what_it_does_at_each_target():
    """aoti compiles a bf16 copy later and casts nothing at the precision step; eager casts."""
    assert targets.get("eager").precision_title("bf16") == "cast to bf16, measure the deviation from fp32"
    assert targets.get("aoti").precision_title("bf16") == (
        "bf16: the package is compiled in bf16 below (model.py and model.safetensors stay fp32)")


def test_the_package_is_checked_at_its_smallest_batch_and_another():
    assert aoti.check_batches((1, 64)) == [1, 3]
    assert aoti.check_batches((4, 8)) == [4, 8]
    assert aoti.check_batches((2, 2)) == [2]


def run_package_without_archspec(folder, package: str, args: tuple) -> torch.Tensor:
    """The package's output for `args`, from a fresh process that cannot import archspec."""
    torch.save({"args": args}, folder / "in.pt")
    script = NO_ARCHSPEC + textwrap.dedent(f"""
        import torch
        model = torch._inductor.aoti_load_package({package!r})
        args = torch.load("in.pt", weights_only=True)["args"]
        out = model(*args)
        torch.save({{"out": out if isinstance(out, torch.Tensor) else out[0]}}, "out.pt")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=folder, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return torch.load(folder / "out.pt", weights_only=True)["out"]


# in every run: the package a user deploys is built and loaded without archspec (cold inductor cache,
# 2 cores: 17 s quiet, 37-48 s shared, most of it g++); its bf16 and bench siblings are in the slow tier
@pytest.mark.skipif(aoti.cpp_compiler() is None, reason="AOTInductor needs a C++ compiler")
def test_build_writes_a_package_that_loads_without_archspec_and_matches_eager(tmp_path, capsys):
    from archspec.compiler.backends.export import example_inputs
    from archspec.compiler.lower import lower
    from archspec.pipeline import check_file

    out = tmp_path / "out"
    assert main(["build", VIT, *TINY, "--target", "aoti", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "-> model.aoti.pt2: compiles C++, minutes for a full-size model" in err
    assert "load model.aoti.pt2 in a fresh process (plain torch) and compare it with eager at batch 1 and 3" in err
    record = json.loads((out / "aoti.json").read_text())
    assert record["precision"] == "fp32" and record["batch"] == [1, 64] and record["compile_s"] > 0
    assert [c["batch"] for c in record["checks"]] == [1, 3] and all(c["max_abs"] < 1e-4 for c in record["checks"])
    assert {"model.pt2", "model.aoti.pt2", "aoti.json"} <= set(json.loads((out / "manifest.json").read_text())["files"])

    report = check_file(VIT, {"img": 32, "depth": 1, "classes": 10})
    model = lower(report.graph, seed=0).eval()
    model.load_state_dict(read_state_dict(str(out / "model.safetensors")))
    args = example_inputs(report.graph, batch=5)  # a batch size the build did not check
    with torch.no_grad():
        expected = model(*args)
    got = run_package_without_archspec(out, "model.aoti.pt2", args)
    assert got.shape == expected.shape and float((got - expected).abs().max()) < 1e-4
    assert package_calls(out / "model.aoti.pt2") == {"oneDNN linear"}  # frozen: no MKL matrix product left


CRASH = """
import os, signal, sys
sys.stderr.write("Exception in aoti_torch: the specified pointer resides on host memory\\n")
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_a_fresh_process_that_dies_checking_the_package_is_an_error_naming_the_signal(monkeypatch):
    """The build's check runs the package in a fresh process: a loader that crashes there (as
    torch 2.11's did on the H200 with a CUDA package) ends that process, not archspec."""
    from archspec.core.errors import InternalError

    monkeypatch.setattr(aoti, "FRESH_RUN", CRASH)
    with pytest.raises(InternalError) as caught:
        aoti.run_in_fresh_process("model.aoti.pt2", "cpu", 1, [(torch.zeros(1),)])
    text = caught.value.message
    assert text == ("a fresh Python process loading model.aoti.pt2 and running it died of SIGSEGV; its last words: "
                    "Exception in aoti_torch: the specified pointer resides on host memory")
    assert f"compiled by torch {torch.__version__}" in caught.value.hint


def test_a_fresh_process_that_fails_checking_the_package_gives_its_status_and_last_line(monkeypatch):
    monkeypatch.setattr(aoti, "FRESH_RUN", "import sys; print('loading...', file=sys.stderr); sys.exit('no such file')")
    from archspec.core.errors import InternalError

    with pytest.raises(InternalError) as caught:
        aoti.run_in_fresh_process("model.aoti.pt2", "cpu", 1, [])
    assert caught.value.message.endswith("exited with status 1; its last words: no such file")


def test_the_fresh_process_refuses_archspec():
    """FRESH_RUN's first lines make an archspec import fail there: the package is seen to load with plain torch."""
    refuse = aoti.FRESH_RUN.split("import torch")[0]
    done = subprocess.run([sys.executable, "-c", refuse + "import archspec.compiler"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "the package needs archspec: it must load with plain torch" in done.stderr


def package_calls(package) -> set[str]:
    """Which kind of matrix product the package's C++ wrapper calls: oneDNN's linear on weights
    packed at compile time (inductor's freezing), or a plain addmm/mm (MKL's BLAS on the CPU)."""
    import zipfile

    with zipfile.ZipFile(package) as archive:
        wrapper = "".join(archive.read(name).decode(errors="ignore")
                          for name in archive.namelist() if name.endswith("wrapper.cpp"))
    kinds = {"oneDNN linear": "_linear_pointwise", "addmm": "aoti_torch_cpu_addmm", "mm": "aoti_torch_cpu_mm"}
    return {kind for kind, call in kinds.items() if call in wrapper}


@pytest.mark.slow
@pytest.mark.skipif(aoti.cpp_compiler() is None, reason="AOTInductor needs a C++ compiler")
def test_bf16_build_records_the_packages_deviation(tmp_path, capsys):
    if not precision_rules.cpu_has_bf16():
        pytest.skip("this CPU has no bf16 instructions")
    out = tmp_path / "out"
    assert main(["build", VIT, *TINY, "--target", "aoti", "--precision", "bf16", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "AOTInductor (bf16" in err and "bf16: the package is compiled in bf16 below" in err
    assert "cast to bf16" not in err  # nothing is cast before the package's own compile
    deviation = json.loads((out / "precision.json").read_text())["deviation"]
    assert deviation["target"] == "aoti" and deviation["precision"] == "bf16"
    assert 0 < deviation["max_abs"] < 0.1 * deviation["scale"] and deviation["top1_total"] > 0
    record = json.loads((out / "aoti.json").read_text())
    assert record["precision"] == "bf16" and record["deviation"]["max_abs"] == deviation["max_abs"]


@pytest.mark.slow
@pytest.mark.skipif(aoti.cpp_compiler() is None, reason="AOTInductor needs a C++ compiler")
def test_bench_times_the_package_beside_eager(capsys):
    assert main(["bench", VIT, *TINY, "--target", "eager", "aoti", "--batch", "1", "2", "--rounds", "1",
                 "--threads", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["target"], r["batch"]): r for r in data["rows"]}
    for batch in (1, 2):
        row = rows[("aoti", batch)]
        assert row["status"] == "ok" and row["median_ms"] > 0 and row["probe_percent"] > 0
        assert row["deviation"]["max_abs"] < 1e-4
    assert any("AOTInductor package, kernels compiled for 1 thread" in n for n in data["notes"])


# fp32 on the GPU: cuDNN's convolutions (the patch embedding) run in TF32 by default, so the bound is
# TensorRT's fp32 one (tests/backends/test_tensorrt.py), not the CPU package's 1e-4
GPU_FP32_ATOL = 1e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_device_cuda_builds_a_package_for_the_gpu_that_loads_there_without_archspec(precision, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["build", VIT, *TINY, "--target", "aoti", "--device", "cuda", "--precision", precision,
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"AOTInductor ({precision}, dynamic batch 1-64, for {torch.cuda.get_device_name()}" in err
    record = json.loads((out / "aoti.json").read_text())
    assert record["device"].startswith("cuda (") and [c["batch"] for c in record["checks"]] == [1, 3]
    if precision == "fp32":
        assert all(c["max_abs"] < GPU_FP32_ATOL for c in record["checks"])
    else:
        assert record["deviation"]["precision"] == "bf16" and record["deviation"]["max_abs"] > 0
    assert json.loads((out / "manifest.json").read_text())["build"]["device"] == "cuda"
    from archspec.compiler.backends.export import example_inputs
    from archspec.pipeline import check_file

    args = example_inputs(check_file(VIT, {"img": 32, "depth": 1, "classes": 10}).graph, batch=5)
    script = NO_ARCHSPEC + textwrap.dedent("""
        import torch
        model = torch._inductor.aoti_load_package("model.aoti.pt2")
        args = torch.load("in.pt", weights_only=True)["args"]
        out = model(*(a.cuda() for a in args))
        out = out if isinstance(out, torch.Tensor) else out[0]
        assert out.is_cuda, out.device
        print(tuple(out.shape))
    """)
    torch.save({"args": args}, out / "in.pt")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=out, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "(5, 10)"


def test_a_cpp_compiler_that_fails_is_an_error_with_its_words_not_a_crash(tmp_path, capsys):
    from torch._inductor import config

    broken = tmp_path / "broken-c++"
    broken.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo broken 1.0; exit 0; fi\n'
                      'echo "fatal error: Python.h: No such file or directory" >&2; exit 1\n')
    broken.chmod(0o755)
    out = tmp_path / "out"
    with config.patch({"cpp.cxx": (None, str(broken))}):
        code = main(["build", VIT, *TINY, "--target", "aoti", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "error: AOTInductor's C++ compile failed: fatal error: Python.h: No such file or directory" in err
    assert f"hint: check the C++ compiler ({broken})" in err and "Traceback" not in err and "bug" not in err
    assert not out.exists()
