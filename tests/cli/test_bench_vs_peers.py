"""tests/benchmarks/bench_vs_peers.py's tables: what a row says when some of its paths were not
measured (a --deadline on a lent GPU), and which columns a CUDA table has. No timing here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "bench_vs_peers.py"


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("bench_vs_peers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(device: str, times: dict[str, float], failed: dict[str, str] | None = None) -> dict:
    paths = {label: {"median_ms": ms, "probe_share": 0.5} for label, ms in times.items()}
    best = lambda names: min((paths[n]["median_ms"], n) for n in names if n in paths)  # noqa: E731
    out = {"spec": "swin_t", "batch": 8, "precision": "bf16", "device": device, "failed": failed or {},
           "paths": paths, "best_peer": best(["timm eager", "timm compile", "timm compile frozen", "timm onnx"]),
           "best_ours": best(["archspec eager", "archspec compile", "archspec onnx", "archspec aoti"])}
    out["best_ratio"] = out["best_ours"][0] / out["best_peer"][0]
    out["eager_ratio"] = paths["archspec eager"]["median_ms"] / paths["timm eager"]["median_ms"]
    return out


def test_a_cuda_table_has_no_onnx_runtime_columns_and_keeps_small_times_readable(peers):
    table = peers.markdown([row("cuda", {"timm eager": 6.4, "timm compile": 3.5, "archspec eager": 4.6,
                                         "archspec compile": 3.2, "archspec aoti": 1.43})], "bf16")
    header, _, line = table.splitlines()[2:5]
    assert "ORT" not in header and "CUDA graphs" in header and header.count("|") == 17  # 16 columns
    assert "archspec cudagraphs" in header  # archspec's own CUDA-graph path beside timm's
    assert "| 6.4 | 3.5 | — | — | — | 4.6 | 3.2 | — | 1.43 |" in line and "**0.41** (aoti) | ≤ 0.85 met | 0.72 |" in line


def test_a_row_with_a_path_left_out_at_the_deadline_gets_no_ratio(peers):
    left_out = {"archspec compile": "not measured: past --deadline 400 s",
                "archspec aoti": "not measured: past --deadline 400 s"}
    partial = row("cuda", {"timm eager": 9.1, "timm compile": 4.3, "archspec eager": 8.1}, left_out)
    assert not peers.complete(partial)
    line = peers.markdown([partial], "bf16").splitlines()[-1]
    assert "| — | — | — | not all paths measured | 0.89 |" in line and "**" not in line


def test_a_path_that_failed_to_run_still_leaves_the_row_complete(peers):
    broken = row("cpu", {"timm eager": 63, "timm onnx": 36, "archspec eager": 40, "archspec aoti": 29},
                 {"timm compile": "RuntimeError: something"})
    assert peers.complete(broken)
    line = peers.markdown([broken], "fp32").splitlines()[-1]
    assert "| 63 | — | — | 36 | 40 | — | — | — | 29 | **0.81** (aoti) | ≤ 0.80 missed |" in line
