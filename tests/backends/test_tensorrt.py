"""TensorRT: operator coverage for every spec (static batch and a batch range), real engines for
small variants of every architecture family (TensorRT-RTX builds them on the CPU), located
errors, and the GPU path (compile, save, reload, compare; `gpu` marker, skipped without CUDA).

Timing: coverage is a torch.export plus torch-tensorrt's lowering per spec and batch mode;
each engine build is a child process (about 10 s for the small variants). swin_t at full size
is marked `slow` and runs only when selected (`-m slow`).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch

import archspec
from archspec.core.errors import SpecError
from archspec.compiler.backends import tensorrt as T
from archspec.compiler.backends.batch import BatchRange
from archspec.compiler.backends.export import example_inputs
from archspec.compiler.backends.tensorrt import gpu_present
from archspec.compiler.backends.tensorrt.coverage import ConverterRegistry
from archspec.compiler.backends.tensorrt.engine import new_job, run_job
from archspec.compiler.backends.tensorrt.failure import FailedNode
from archspec.compiler.backends.tensorrt.job import Job, Outcome
from archspec.compiler.backends.tensorrt.program import input_profiles
from archspec.compiler.lower import lower
from archspec.compiler.modules.attention.window import WindowAttention

from tests.conftest import ALL_SPECS, NO_ARCHSPEC, ROOT, built, spec_id

HAVE_TRT = importlib.util.find_spec("torch_tensorrt") is not None
needs_trt = pytest.mark.skipif(not HAVE_TRT, reason="torch-tensorrt is not installed (pip install "
                                                     "'archspec-compiler[tensorrt-rtx]')")
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SPECS_DIR = ROOT / "specs"
RANGE = "1:8:64"
STATIC = "1"

# Small variants of every architecture family: the same primitives and code paths, a fraction
# of the width and depth (and shifted windows still shift: a 4x4 window on 32/16/8 grids).
SWIN_SMALL = {"img": 128, "window": 4, "dims": [16, 32, 64, 128], "depths": [2, 2, 2, 2], "heads": [1, 2, 4, 8],
              "classes": 10}
PVT_SMALL = {"dims": [16, 32, 64, 128], "depths": [1, 1, 1, 1], "heads": [1, 2, 4, 8], "classes": 10}
FAMILIES = {  # family: (spec, overrides, precision, batch)
    "swin": ("swin_t", SWIN_SMALL, "fp32", RANGE),
    "swinv2": ("swinv2_t", SWIN_SMALL, "fp32", RANGE),
    "pvt_v1": ("pvt_v1_tiny", {**PVT_SMALL, "img": 64}, "fp32", "4"),
    "pvt_v2": ("pvt_v2_b0", {**PVT_SMALL, "img": 64}, "fp16", "1:8:32"),
    "pvt_v2_li": ("pvt_v2_b2_li", {**PVT_SMALL, "img": 224}, "fp32", "1:4:16"),
    "clip": ("clip_vit_b32", {"img": 64, "context": 16, "vocab": 1000, "eos_id": 999, "embed": 32,
                              "vision_dim": 64, "vision_depth": 2, "vision_heads": 2, "vision_mlp": 128,
                              "text_dim": 64, "text_depth": 2, "text_heads": 2, "text_mlp": 128}, "fp32", RANGE),
    "transformer": ("transformer_base", {"vocab": 1000, "dim": 64, "heads": 2, "ffn": 128, "layers": 2},
                    "fp16", "2:4:16"),
    "backbone": ("examples/detector_backbone", {"img": 128, "dims": [16, 32, 64, 128], "depths": [1, 1, 1, 1],
                                                "heads": [1, 2, 4, 8]}, "fp32", "1:2:8"),  # four outputs
}
VIT_SMALL = ["--set", "img=64", "--set", "depth=2", "--set", "dim=64", "--set", "heads=2"]  # vit: the CLI test


@pytest.fixture(scope="module")
def tt():
    if not HAVE_TRT:
        pytest.skip("torch-tensorrt is not installed")
    return T.load_torch_tensorrt()


@pytest.fixture(scope="module")
def can_build(tt):
    if not gpu_present() and not T.is_rtx(tt):
        pytest.skip("building needs a CUDA GPU or torch-tensorrt-rtx")
    return tt


def small(spec: str, overrides: dict):
    report = archspec.check(str(SPECS_DIR / f"{spec}.yaml"), overrides=overrides)
    return report, lower(report.graph, seed=0)


# -- coverage: every spec, static and a range ----------------------------------------------------------


@needs_trt
@pytest.mark.pipeline
@pytest.mark.parametrize("batch", [STATIC, RANGE], ids=["static", "range"])
@pytest.mark.parametrize("spec_path", [str(p) for p in ALL_SPECS], ids=[spec_id(p) for p in ALL_SPECS])
def test_every_op_converts(spec_path, batch, tt):
    report, gm = built(spec_path)
    program = T.export_for_tensorrt(gm, report.graph, "fp32", batch)
    repeats = [n for n in program.graph.nodes if n.target is torch.ops.aten.repeat.default]
    assert not repeats, "broadcast to the batch with expand, not repeat (a symbolic repeat does not convert)"
    coverage = T.check_coverage(program, report.graph, "fp32", batch)
    print(coverage.summary())
    assert coverage.complete, coverage.summary()
    assert coverage.total > 0 and coverage.to_json()["converted"] == coverage.total
    if any(fusable_attention(report.graph.node(name)) for name in report.graph.order()):
        assert coverage.ops["aten.scaled_dot_product_attention.default"] > 0  # attention stays one fused op


def fusable_attention(node) -> bool:
    """An attention node whose score parts all allow the fused kernel (a part that changes the
    scores themselves, as sinks or talking heads, writes the attention out)."""
    from archspec.primitives.ops.attention.scores.base import parse_scores

    if getattr(node.op, "primitive", None) != "attention":
        return False
    return not any(use.part.explicit for use in parse_scores(getattr(node.params, "scores", None) or []))


@needs_trt
def test_window_mask_uses_expand(tt):
    """Swin's shift mask reaches the batch through expand; with a dynamic batch the shifted
    windows convert (a repeat by the batch would pass the registry and fail to convert). The
    shift itself is a gather into window order (no roll: test_rewrites.py)."""
    report, gm = small("swin_t", SWIN_SMALL)
    program = T.export_for_tensorrt(gm, report.graph, "fp32", RANGE)
    targets = {n.target for n in program.graph.nodes}
    assert torch.ops.aten.expand.default in targets and torch.ops.aten.roll.default not in targets
    assert torch.ops.aten.repeat.default not in targets
    assert T.check_coverage(program, report.graph, "fp32", RANGE).complete


_ATTN_MASK = WindowAttention.attn_mask


def _attn_mask_with_repeat(self, batch):  # what the primitive must not do
    if self.shift_mask is None:
        return _ATTN_MASK(self, batch)
    mask = self.position_bias()[None] + self.shift_mask  # [nW, h, A, A]
    return mask.repeat(batch, 1, 1, 1)  # [B*nW, h, A, A]


@needs_trt
def test_an_op_that_does_not_convert_is_located_at_its_spec_node(tt, monkeypatch):
    monkeypatch.setattr(WindowAttention, "attn_mask", _attn_mask_with_repeat)
    report = archspec.check(str(SPECS_DIR / "swin_t.yaml"), overrides=SWIN_SMALL)
    coverage = T.coverage_report(report.graph, batch=RANGE)
    assert not coverage.complete
    diags = coverage.diagnostics()
    paths = [d.path for d in diags]
    assert "stages.0.blocks.1.attn" in paths  # the first shifted block; W-MSA blocks have no mask to repeat
    assert all(p.endswith(".attn") and ".blocks." in p for p in paths)
    diag = diags[paths.index("stages.0.blocks.1.attn")]
    assert "aten.repeat.default" in diag.message and "expand" in diag.hint
    assert diag.loc.file.endswith("swin_t.yaml") and diag.loc == report.graph.node(diag.path).loc
    assert "would fall back to PyTorch" in coverage.summary()
    assert coverage.to_json()["complete"] is False
    # a static batch converts the same module
    assert T.coverage_report(report.graph, batch="2").complete


@needs_trt
def test_check_target_tensorrt_cli(tt, capsys):
    from archspec.cli import main

    spec = str(SPECS_DIR / "vit_b16.yaml")
    assert main(["check", spec, *VIT_SMALL, "--target", "tensorrt", "--batch", "1:4:8"]) == 0
    out = capsys.readouterr().out
    assert "TensorRT coverage" in out and "(100%), nothing falls back to PyTorch" in out
    assert main(["check", spec, *VIT_SMALL, "--target", "tensorrt", "--batch", "2", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["tensorrt"]
    assert record["complete"] and record["batch"] == {"min": 2, "opt": 2, "max": 2}
    assert main(["check", spec, "--target", "tensorrt", "--batch", "8:1:2"]) == 2  # a usage error


@needs_trt
@pytest.mark.parametrize("version", ["2.14.0", "2.99.0"])
def test_a_torch_tensorrt_without_the_private_registry_is_named_not_an_attribute_error(version, tt, monkeypatch):
    monkeypatch.setattr(tt, "__version__", f"{version}+cu130")
    monkeypatch.delattr("torch_tensorrt.dynamo.conversion._ConverterRegistry.DYNAMO_CONVERTERS")
    with pytest.raises(SpecError) as caught:
        ConverterRegistry(tt)
    diag = caught.value.diagnostics[0]
    assert diag.message == (f"torch-tensorrt {version} has no torch_tensorrt.dynamo.conversion._ConverterRegistry."
                            "DYNAMO_CONVERTERS: the TensorRT coverage check reads torch-tensorrt's private converter "
                            "registry, written for torch-tensorrt 2.14")
    assert ("reinstall" if version == "2.14.0" else "'torch-tensorrt==2.14.*'") in diag.hint


@needs_trt
def test_a_missing_registry_method_or_setting_is_named(tt, monkeypatch):
    registry = sys.modules["torch_tensorrt.dynamo.conversion._ConverterRegistry"].DYNAMO_CONVERTERS
    monkeypatch.delattr(type(registry), "set_compilation_settings")
    with pytest.raises(SpecError, match="has no DYNAMO_CONVERTERS.set_compilation_settings: "):
        ConverterRegistry(tt)


@needs_trt
def test_the_job_and_its_outcome_cross_the_process_boundary_unchanged(tt, tmp_path):
    report = archspec.check(str(SPECS_DIR / "vit_b16.yaml"), overrides={"img": 32, "depth": 1, "dim": 32,
                                                                         "heads": 1})
    job = Job(mode="aot", program="p.pt2", precision="fp16", work=str(tmp_path), batch=BatchRange(1, 4, 8),
              inputs=tuple(input_profiles(report.graph, "fp16", "1:4:8")), outputs=("output",),
              engine="model.engine", saved="model.trt.pt2", metadata="tensorrt.json",
              spec={"name": report.graph.name, "file": report.graph.file})
    assert job.inputs[0]["dynamic_axes"] == {0: "B"}
    job.write()
    assert Job.read(job.job_file) == job
    node = FailedNode("aten.repeat.default", "repeat", 'File "s.yaml", line 3, in a.b', ("L['self'].a",))
    outcome = Outcome(ok=False, error="RuntimeError: no", failed_node=node)
    outcome.write(job.result_file)
    assert Outcome.read(job.result_file) == outcome


BLOCK_TORCH_TENSORRT = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch_tensorrt", "tensorrt", "tensorrt_rtx"):
                raise ImportError(name)
            return None
    sys.meta_path.insert(0, Block())
    import importlib.util
    _find = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] == "torch_tensorrt" else _find(name, *a)
    from archspec.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("command", ["check", "build"])
def test_without_torch_tensorrt_the_error_says_what_to_install(command, tmp_path):
    args = [command, str(SPECS_DIR / "vit_b16.yaml"), "--target", "tensorrt"]
    if command == "build":
        args += ["-o", str(tmp_path / "out")]
    result = subprocess.run([sys.executable, "-c", BLOCK_TORCH_TENSORRT, *args], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, result.stderr
    assert "needs torch-tensorrt, which is not installed" in result.stderr
    assert "pip install 'archspec-compiler[tensorrt-rtx]'" in result.stderr
    assert "'archspec-compiler[tensorrt]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # refused before any work


# -- engines --------------------------------------------------------------------------------------------


def _check_engine(result, outdir, graph, precision, batch):
    batch = BatchRange.of(batch)
    engine = outdir / "model.engine"
    meta = json.loads((outdir / "tensorrt.json").read_text())
    assert engine.stat().st_size == result.engine_bytes > 100_000
    assert meta["precision"] == precision and meta["batch"] == {"min": batch.min, "opt": batch.opt, "max": batch.max}
    assert [i["name"] for i in meta["inputs"]] == [n.name for n in graph.inputs()]
    assert meta["outputs"] == [o.name for o in graph.outputs]
    for record, node in zip(meta["inputs"], graph.inputs()):
        assert record["min"][0] == batch.min and record["max"][0] == batch.max
        assert record["dtype"] == ("int64" if node.type.dtype == "int64" else
                                   {"fp32": "float32", "fp16": "float16"}[precision])
    if not gpu_present():
        assert "RTX-class" in meta["targets"] and any("RTX-class" in n for n in result.notes)
    print(f"{graph.name} ({precision}, batch {batch}): {result.summary()}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_engine_builds_for_a_small_variant(family, can_build, tmp_path):
    spec, overrides, precision, batch = FAMILIES[family]
    report, gm = small(spec, overrides)
    result = T.build_engine(gm, report.graph, str(tmp_path), precision, batch)
    _check_engine(result, tmp_path, report.graph, precision, batch)
    if gpu_present():
        assert result.max_difference is not None
        if precision == "fp32":
            assert result.max_difference < GPU_FP32_ATOL


def test_build_target_tensorrt_cli(can_build, tmp_path):
    result = subprocess.run([sys.executable, "-m", "archspec", "build", str(SPECS_DIR / "vit_b16.yaml"), *VIT_SMALL,
                             "--target", "tensorrt", "--precision", "fp16", "--batch", "1:4:8", "-o", str(tmp_path)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    for step in ("[5/7] torch.export for TensorRT (fp16, batch 1:4:8)", "[6/7] TensorRT coverage",
                 "[7/7] TensorRT"):
        assert step in err, err
    assert "Traceback" not in err
    meta = json.loads((tmp_path / "tensorrt.json").read_text())
    assert meta["precision"] == "fp16" and meta["inputs"][0]["dtype"] == "float16"
    assert (tmp_path / "model.engine").stat().st_size > 100_000 and (tmp_path / "model.pt2").is_file()
    if not gpu_present():
        assert "note: model.engine was built ahead of time without a GPU" in err and "RTX-class" in err
    assert "model.engine (" in result.stdout


@pytest.mark.slow
def test_swin_t_full_size_engine(can_build, tmp_path):
    report, gm = built(str(SPECS_DIR / "swin_t.yaml"))
    result = T.build_engine(gm, report.graph, str(tmp_path), "fp32", RANGE)
    _check_engine(result, tmp_path, report.graph, "fp32", RANGE)


# -- failures in the builder ------------------------------------------------------------------------


class _TwoAttentionsOneQuery(torch.nn.Module):
    """Two SDPAs reading one query: crashes the TensorRT-RTX 1.6 builder in fp32 with a dynamic
    batch (see compiler/backends/tensorrt/engine.py)."""

    def forward(self, image):
        q, k, v = image.reshape(image.shape[0], 3, 4, 32, 8).unbind(1)  # [B, 4 heads, 32, 8] each
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        b = torch.nn.functional.scaled_dot_product_attention(q, v, k, is_causal=True)
        return (a + b).flatten(1)


def _job(tt, graph, program, tmp_path, precision="fp32", batch=RANGE):
    work = tmp_path / "work"
    work.mkdir()
    torch.export.save(program, work / "program.pt2")
    return new_job(tt, graph, str(tmp_path), str(work), str(work / "program.pt2"), precision, BatchRange.of(batch))


def test_a_builder_crash_is_an_archspec_error_not_a_dead_process(can_build, tmp_path):
    if gpu_present():
        pytest.skip("the crash is in the TensorRT-RTX ahead-of-time builder")
    report = archspec.check(str(SPECS_DIR / "vit_b16.yaml"), overrides={"img": 32, "depth": 1, "dim": 32,
                                                                         "heads": 1})
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(_TwoAttentionsOneQuery(), (torch.randn(2, 3, 32, 32),),
                                  dynamic_shapes={"image": {0: batch}})
    job = replace(_job(can_build, report.graph, program, tmp_path), outputs=("output",))
    result = run_job(job, report.graph, timeout=600)  # crashes, then builds with attention decomposed
    assert any("crashed" in n and "decompose_attention=True" in n for n in result.notes)
    assert (tmp_path / "model.engine").stat().st_size > 0


def test_a_conversion_failure_names_the_op_and_the_spec_node(can_build, tmp_path, monkeypatch):
    """Past the coverage check (which would stop it), the converter's own failure is located."""
    monkeypatch.setattr(WindowAttention, "attn_mask", _attn_mask_with_repeat)
    report, gm = small("swin_t", SWIN_SMALL)
    program = T.export_for_tensorrt(gm, report.graph, "fp32", RANGE)
    job = _job(can_build, report.graph, program, tmp_path)
    with pytest.raises(archspec.InternalError) as caught:  # past the checker: a bug (exit 3), not the spec's
        run_job(job, report.graph, timeout=600)
    diag = caught.value.diagnostics[0]
    assert "aten.repeat.default did not convert to TensorRT" in diag.message
    assert diag.path is not None and diag.path.startswith("stages.0.blocks.1.attn")
    assert diag.loc == report.graph.node(diag.path).loc and "expand" in diag.hint


# -- GPU: compile, save, reload without archspec, compare with eager --------------------------------------


# The bound for fp32 (atol 1e-3), fixed here rather than read from the backend. fp16 is to be
# reported, not bounded: 0.1 only catches a broken engine (those are off by O(1) on these outputs).
GPU_FP32_ATOL = 1e-3
GPU_FP16_SANITY = 0.1


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("family", ["swin", "clip"])
def test_gpu_engine_matches_eager_and_reloads_without_archspec(family, precision, can_build, tmp_path):
    spec, overrides, _, batch = FAMILIES[family]
    report, gm = small(spec, overrides)
    result = T.build_engine(gm, report.graph, str(tmp_path), precision, batch)
    bound = GPU_FP32_ATOL if precision == "fp32" else GPU_FP16_SANITY
    print(f"{family} {precision}: max |TensorRT - eager| {result.max_difference:.2e}")
    assert result.max_difference < bound  # False for NaN too
    saved = tmp_path / "model.trt.pt2"
    assert saved.is_file() and (tmp_path / "model.engine").is_file()
    args = example_inputs(report.graph, batch=BatchRange.parse(batch).opt)
    with torch.no_grad():
        expected = gm.eval()(*args)
    torch.save({"args": args, "expected": expected}, tmp_path / "io.pt")
    dtype = {"fp32": "torch.float32", "fp16": "torch.float16"}[precision]
    script = NO_ARCHSPEC + textwrap.dedent(f"""
        import torch, torch_tensorrt
        module = torch.export.load({str(saved)!r}).module()
        io = torch.load({str(tmp_path / 'io.pt')!r}, weights_only=True)
        args = [a.cuda().to({dtype}) if a.is_floating_point() else a.cuda() for a in io["args"]]
        with torch.no_grad():
            out = module(*args)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        exp = io["expected"] if isinstance(io["expected"], tuple) else (io["expected"],)
        print(float(torch.stack([(o.float().cpu() - e).abs().max() for o, e in zip(outs, exp, strict=True)]).max()))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    gap = float(run.stdout.strip().splitlines()[-1])
    print(f"{family} {precision}, reloaded without archspec: max |TensorRT - eager| {gap:.2e}")
    assert gap < bound
