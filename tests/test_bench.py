"""`archspec bench` and its timing helpers: what is measured and reported, never how fast it
is (timings on a shared machine are noise; benchmarks live in tests/benchmarks/)."""

from __future__ import annotations

import json

import pytest
import torch

from archspec.cli.main import main
from archspec.compiler.backends.timing import PeakMemory, Timing, interleaved, machine_description, matmul_probe

from .conftest import ROOT

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
    block = torch.ones(4 * 2**20)  # 16 MB, touched
    measured = peak.stop()
    del block
    if peak.ok:  # Linux with /proc/self/clear_refs: the 16 MB block touched inside must show
        assert measured >= 15 * 2**20, measured
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


def test_bench_usage_errors(capsys):
    assert main(["bench", VIT, "--batch", "0"]) == 2
    assert main(["bench", VIT, "--target", "nope"]) == 2
    assert main(["bench", str(ROOT / "specs" / "missing.yaml")]) == 2
    assert main(["bench", VIT, "--seed", "18446744073709551616"]) == 2  # torch.manual_seed's range
    assert main(["bench", VIT, "--seed", "-1"]) == 2
    assert main(["bench", VIT, "--rounds", "0"]) == 2
    assert "Traceback" not in capsys.readouterr().err
