"""`archspec bench` and its timing helpers: what is measured and reported, never how fast it
is (timings on a shared machine are noise; benchmarks live in tests/benchmarks/)."""

from __future__ import annotations

import json
import mmap

import pytest
import torch

from archspec.cli.main import main
from archspec.compiler.backends.timing import PeakMemory, Timing, interleaved, machine_description, matmul_probe

from tests.conftest import ROOT

TINY = ["--set", "img=32", "--set", "depth=1", "--set", "classes=10"]
VIT = str(ROOT / "specs" / "vit_ti16.yaml")


def test_interleaved_rounds_rotate_and_time_every_runner():
    calls = []
    runners = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    timings = interleaved(runners, rounds=3, iters=1, warmup=1, memory=False)
    assert set(timings) == {"a", "b", "c"} and all(len(t.times) == 3 for t in timings.values())
    rounds = calls[3:]  # after one warm-up call each
    assert rounds[:3] == ["a", "b", "c"] and rounds[3:6] == ["b", "c", "a"] and rounds[6:] == ["c", "a", "b"]


def test_timing_statistics():
    t = Timing("x", [0.3, 0.1, 0.2], work=4.0)
    assert t.median == 0.2 and t.low == 0.1 and t.high == 0.3 and t.rate == 20.0
    assert t.to_json()["median_ms"] == pytest.approx(200.0)


def test_probe_memory_and_machine():
    run, flops = matmul_probe(size=64)
    run()
    assert flops == 2 * 64**3
    peak = PeakMemory()
    peak.start()
    size = 16 * 2**20
    block = mmap.mmap(-1, size)  # fresh pages from the kernel: malloc could hand back resident freed memory (it
    for page in range(0, size, mmap.PAGESIZE):  # does once a test has run `bench --malloc-reuse` in this process)
        block[page] = 1  # touched
    measured = peak.stop()
    block.close()
    if peak.ok:  # Linux with /proc/self/clear_refs: the 16 MB touched inside must show (less what the process
        assert measured >= 12 * 2**20, measured  # may hand back meanwhile; before the fix it saw 4096 bytes)
    else:
        assert measured is None
    assert "torch" in machine_description()


def test_bench_command_times_targets_and_says_why_one_cannot_run(capsys):
    pytest.importorskip("onnxruntime")
    threads_before = torch.get_num_threads()
    code = main(["bench", VIT, *TINY, "--target", "eager", "onnx", "tensorrt", "--batch", "1", "2",
                 "--rounds", "1", "--threads", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert torch.get_num_threads() == threads_before  # --threads holds while it runs, not after
    data = json.loads(out)
    rows = {(r["target"], r["precision"], r["batch"]): r for r in data["rows"]}
    assert set(rows) == {(t, "fp32", b) for t in ("eager", "onnx", "tensorrt") for b in (1, 2)}
    for batch in (1, 2):
        eager, onnx = rows[("eager", "fp32", batch)], rows[("onnx", "fp32", batch)]
        for row in (eager, onnx):
            assert row["status"] == "ok" and row["median_ms"] > 0 and row["min_ms"] <= row["median_ms"]
            assert row["samples_per_s"] > 0 and row["probe_share"] > 0
        assert onnx["deviation"]["max_abs"] < 1e-4
    trt = rows[("tensorrt", "fp32", 1)]
    if not torch.cuda.is_available():
        assert trt["status"] != "ok" and "GPU" in trt["status"] or "not installed" in trt["status"]
    assert data["threads"] == 1 and data["probe_gflops"]["fp32"] > 0
    assert set(data["isa"]) >= {"cpu", "flags", "line"} and data["rows"][0]["probe_precision"] == "fp32"
    assert any("Attention" in n for n in data["notes"])


def test_bench_table_lists_lower_precisions_with_their_deviation(capsys):
    code = main(["bench", VIT, *TINY, "--target", "eager", "onnx", "--precision", "fp32", "bf16", "--batch", "1",
                 "--rounds", "1", "--samples", "4"])
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.splitlines()
    assert any(line.startswith("eager") and "bf16" in line and "top-1" in line for line in lines) or \
        any("eager bf16" in line and "not run" in line for line in lines)
    assert any("not run: onnx bf16" in line and "MatMul" in line for line in lines)
    assert "matmul probe" in captured.out
    assert lines[0].startswith("CPU: ") and "ISA: " in lines[0]  # above everything, the machine's extensions


def test_bench_usage_errors(capsys):
    assert main(["bench", VIT, "--batch", "0"]) == 2
    assert main(["bench", VIT, "--target", "nope"]) == 2
    assert main(["bench", str(ROOT / "specs" / "missing.yaml")]) == 2
    assert main(["bench", VIT, "--seed", "18446744073709551616"]) == 2  # torch.manual_seed's range
    assert main(["bench", VIT, "--seed", "-1"]) == 2
    assert main(["bench", VIT, "--rounds", "0"]) == 2
    assert "Traceback" not in capsys.readouterr().err


# -- the CPU line and the share of the probe -----------------------------------------------------------

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512dq avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512dq avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 avx512_vnni avx_vnni
"""
ZEN3 = "processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\nflags\t\t: fpu sse2 avx avx2 fma\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd bf16 sve\nCPU implementer\t: 0x41\n"


def test_the_isa_line_names_the_cpu_and_what_it_has_for_bf16_and_int8():
    from archspec.core.isa import parse_cpuinfo

    spr = parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert spr.line() == ("Intel(R) Xeon(R) Platinum 8480+; ISA: AVX2, AVX-512, AVX512-BF16, AVX512-VNNI, AMX-BF16, "
                          "AMX-INT8")
    assert spr.bf16 and spr.to_json()["flags"] == {"avx2": True, "avx512f": True, "avx512_bf16": True,
                                                   "avx512_vnni": True, "amx_bf16": True, "amx_int8": True}
    zen4 = parse_cpuinfo(ZEN4)
    assert zen4.line() == "AMD EPYC 9654 96-Core Processor; ISA: AVX2, AVX-512, AVX512-BF16, AVX512-VNNI; no AMX"
    assert zen4.bf16 and not zen4.has("amx_int8")
    zen3 = parse_cpuinfo(ZEN3)
    assert zen3.line() == "AMD EPYC 7763 64-Core Processor; ISA: AVX2; no AMX" and not zen3.bf16
    arm = parse_cpuinfo(ARM, fallback="aarch64")
    assert arm.line() == "aarch64; ISA: unknown (no x86 flags in /proc/cpuinfo)" and arm.to_json()["flags"] is None


def test_each_row_is_a_percentage_of_the_probe_of_its_own_precision():
    from archspec.compiler.backends.bench import BenchResult, Row, Variant, probe_precision, probe_share
    from archspec.core.isa import parse_cpuinfo

    assert probe_share(2e9, 0.01, 4e11) == pytest.approx(0.5)  # 200 GFLOP/s of a 400 GFLOP/s probe
    assert probe_share(2e9, 0.01, None) is None and probe_share(0.0, 0.01, 4e11) is None
    assert [probe_precision(p) for p in ("fp32", "bf16", "fp16", "int8")] == ["fp32", "bf16", "fp16", "fp32"]
    fp32 = Row(Variant("eager", "fp32"), 2, Timing("a", [0.01, 0.02, 0.01]), flops=2e9, probe_rate=4e11)
    bf16 = Row(Variant("eager", "bf16"), 2, Timing("b", [0.004]), flops=2e9, probe_rate=2e12)
    result = BenchResult([fp32, bf16], threads=2, rounds=3, machine="test machine",
                         probes={"fp32": 4e11, "bf16": 2e12}, isa=parse_cpuinfo(ZEN4))
    data = result.to_json()
    assert data["isa"]["line"].startswith("AMD EPYC 9654") and data["isa"]["bf16"]
    assert data["rows"][0]["probe_percent"] == pytest.approx(50.0) and data["rows"][0]["probe_precision"] == "fp32"
    assert data["rows"][1]["probe_percent"] == pytest.approx(25.0) and data["rows"][1]["probe_precision"] == "bf16"
    lines = result.table(title="tiny: 1.00 GFLOPs per sample").splitlines()
    assert lines[0] == "CPU: AMD EPYC 9654 96-Core Processor; ISA: AVX2, AVX-512, AVX512-BF16, AVX512-VNNI; no AMX"
    assert lines[1] == "tiny: 1.00 GFLOPs per sample" and "% probe" in lines[3]
    assert lines[4].startswith("eager     fp32") and lines[4].split()[-1] == "50%"
    assert lines[5].startswith("eager     bf16") and lines[5].split()[-1] == "25%"


def starved(fails_at: int, failure: Exception):
    """bench.prepare whose onnx variant's warm-up at batch `fails_at` raises `failure`."""
    from archspec.compiler.backends import bench

    real = bench.prepare

    def prepare(variant, *args, **kwargs):
        made = real(variant, *args, **kwargs)
        if variant.target != "onnx":
            return made

        def bind(batch):
            if batch == fails_at:
                raise failure
            return made.bind(batch)

        return bench.Prepared(bind, made.outputs, made.note)

    return prepare


def test_a_variant_that_runs_out_of_memory_is_a_row_that_says_so(monkeypatch, capsys):
    """ONNX Runtime's allocation failure at one batch size: that row says so, the others are timed."""
    from archspec.compiler.backends import bench

    pytest.importorskip("onnxruntime")
    oom = RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory for requested "
                       "buffer of size 123456789")
    monkeypatch.setattr(bench, "prepare", starved(2, oom))
    code = main(["bench", VIT, *TINY, "--target", "eager", "onnx", "--batch", "1", "2", "--rounds", "1",
                 "--threads", "1", "--json"])
    assert code == 0
    rows = {(r["target"], r["batch"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows[("onnx", 2)]["status"].startswith("ran out of memory at batch 2 ([ONNXRuntimeError]")
    assert all(rows[key]["status"] == "ok" for key in (("onnx", 1), ("eager", 1), ("eager", 2)))


def test_a_variant_that_fails_otherwise_is_not_hidden_as_a_row(monkeypatch, capsys):
    """Any other failure is a defect, reported as the crash it is (exit 3), not a row."""
    from archspec.compiler.backends import bench

    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(bench, "prepare", starved(2, ValueError("a bug, not memory")))
    code = main(["bench", VIT, *TINY, "--target", "eager", "onnx", "--batch", "1", "2", "--rounds", "1",
                 "--threads", "1", "--json"])
    assert code == 3 and "a bug, not memory" in capsys.readouterr().err


def test_the_compile_target_runs_frozen_on_the_cpu_as_for_inference(monkeypatch):
    """`bench --target compile` on the CPU compiles with inductor's freezing (bench.compiled_settings)
    and gives eager's outputs; eager freezes nothing."""
    import torch._inductor.freezing as freezing

    import archspec
    from archspec.compiler.backends.bench import bench_inputs, torch_runner
    from archspec.compiler.lower import lower

    frozen = []
    real_freeze = freezing.freeze
    monkeypatch.setattr(freezing, "freeze", lambda *a, **k: frozen.append(1) or real_freeze(*a, **k))
    report = archspec.check(VIT, overrides={"img": 32, "depth": 1, "classes": 10})
    model = lower(report.graph, seed=0).eval()
    args = bench_inputs(report.graph, 2, torch.float32, "cpu")
    eager = torch_runner(model, report.graph, "fp32", compiled=False, device="cpu")
    eager.bind(2)()
    assert not frozen
    compiled = torch_runner(model, report.graph, "fp32", compiled=True, device="cpu")
    compiled.bind(2)()
    assert frozen  # inductor froze the weights while compiling
    assert float((compiled.outputs(args)[0] - eager.outputs(args)[0]).abs().max()) < 1e-4


def test_every_compiled_variant_is_compiled_past_dynamos_default_limit(monkeypatch):
    """Each batch size of the compile target is a compile of the same function (model.py's
    __call__); past dynamo's default of 8 it ran eager under the "compile" label. Ten batch sizes:
    ten compiles (each freezes its weights once on the CPU)."""
    import torch._inductor.freezing as freezing

    import archspec
    from archspec.compiler.backends.bench import torch_runner
    from archspec.compiler.lower import lower

    frozen = []
    real_freeze = freezing.freeze
    monkeypatch.setattr(freezing, "freeze", lambda *a, **k: frozen.append(1) or real_freeze(*a, **k))
    report = archspec.check(VIT, overrides={"img": 32, "depth": 1, "classes": 10})
    model = lower(report.graph, seed=0).eval()
    compiled = torch_runner(model, report.graph, "fp32", compiled=True, device="cpu")
    for batch in range(1, 11):
        compiled.bind(batch)()
    assert len(frozen) == 10


def test_the_cudagraphs_target_says_it_needs_a_gpu_and_times_nothing_on_the_cpu(capsys):
    """`bench --target cudagraphs` without a CUDA GPU: the other targets are timed, this one is
    listed as not run, in words (on a GPU tests/benchmarks/cuda_run.sh times it)."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the target runs")
    code = main(["bench", str(ROOT / "specs" / "vit_ti16.yaml"), "--set", "img=32", "--set", "depth=1", "--set",
                 "classes=10", "--target", "eager", "cudagraphs", "--batch", "1", "--rounds", "1", "--threads", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "not run: cudagraphs fp32: no CUDA GPU on this machine" in out
    assert not any(line.startswith("cudagraphs") for line in out.splitlines())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_cudagraphs_target_replays_a_recorded_graph_at_each_batch(capsys):
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    counters.clear()
    with inductor_config.patch({"triton.cudagraph_or_error": True}):  # an op left out of the graph raises
        code = main(["bench", str(ROOT / "specs" / "vit_ti16.yaml"), "--set", "img=32", "--set", "depth=1", "--set",
                     "classes=10", "--target", "compile", "cudagraphs", "--device", "cuda", "--batch", "1", "4",
                     "--rounds", "2"])
    out = capsys.readouterr().out
    assert code == 0 and sum(line.startswith("cudagraphs") for line in out.splitlines()) == 2, out
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])
