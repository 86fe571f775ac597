"""`archspec bench SPEC --generate` and compiler/backends/bench_generate.py: which figures are
reported and that they agree with one another, never how fast anything is (timings on a shared
machine are noise; tests/benchmarks/bench_generate.py is the benchmark)."""

from __future__ import annotations

import json

import pytest
import torch

import archspec
from archspec.cli.main import main
from archspec.compiler.backends.bench_generate import around, kv_cache_bytes, positions, weight_matrices

from tests.conftest import ROOT

TINY_LM = str(ROOT / "specs" / "examples" / "tiny_lm.yaml")
SMALL = {"vocab": 97, "dim": 32, "depth": 2, "heads": 2}
SETS = [arg for k, v in SMALL.items() for arg in ("--set", f"{k}={v}")]
QUICK = ["--generate", "--rounds", "1", "--new-tokens", "11", "--prompt", "4", "--threads", "1"]


def test_bench_generate_reports_consistent_positive_figures(capsys):
    threads_before = torch.get_num_threads()
    code = main(["bench", TINY_LM, *SETS, *QUICK, "--precision", "fp32", "bf16", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert torch.get_num_threads() == threads_before
    data = json.loads(out)
    assert data["spec"] == "tiny_lm" and data["threads"] == 1 and data["batch"] == 1
    assert set(data["isa"]) >= {"cpu", "flags", "line"}
    rows = {r["precision"]: r for r in data["rows"]}
    assert set(rows) == {"fp32", "bf16"}
    for r in rows.values():
        assert r["prompt"] == 4 and r["new_tokens"] == 11
        assert 4 < r["early_position"] < r["late_position"] < 4 + 11
        for key in ("prefill_ms", "ms_per_token_early", "ms_per_token_late", "ms_per_token", "tokens_per_s",
                    "floor_ms_per_token", "floor_ratio", "late_over_early", "weights_bytes", "kv_cache_bytes"):
            assert r[key] > 0, key
        assert r["tokens_per_s"] == pytest.approx(1000 / r["ms_per_token"])
        assert r["floor_ratio"] == pytest.approx(r["ms_per_token"] / r["floor_ms_per_token"])
        assert r["late_over_early"] == pytest.approx(r["ms_per_token_late"] / r["ms_per_token_early"])
        assert r["peak_rss_growth_bytes"] is None or r["peak_rss_growth_bytes"] >= 0
    # the KV cache: keys and values of 2 layers, 2 heads x 16 dims, prompt + new slots; bf16 half of fp32
    assert rows["fp32"]["kv_cache_bytes"] == 2 * 2 * 2 * 16 * (4 + 11) * 4
    assert rows["bf16"]["kv_cache_bytes"] * 2 == rows["fp32"]["kv_cache_bytes"]
    assert rows["bf16"]["weights_bytes"] * 2 == rows["fp32"]["weights_bytes"]


def test_bench_generate_table_names_every_figure(capsys):
    code = main(["bench", TINY_LM, *SETS, *QUICK])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0].startswith("CPU: ") and "ISA: " in lines[0]
    header = next(line for line in lines if line.startswith("prec"))
    for name in ("prefill ms", "ms/tok @7", "ms/tok @12", "tokens/s", "floor ms", "/floor", "KV cache MB",
                 "peak RSS +MB"):
        assert name in header, name
    assert any(line.startswith("fp32 ") for line in lines)
    assert any(line.startswith("floor: ") for line in lines)


def test_bench_generate_times_the_compiled_decode_step_beside_eager(capsys):
    code = main(["bench", TINY_LM, *SETS, *QUICK, "--target", "eager", "compile", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    rows = {r["target"]: r for r in data["rows"]}
    assert set(rows) == {"eager", "compile"} and all(r["precision"] == "fp32" for r in rows.values())
    assert rows["eager"]["compile_s"] is None and rows["compile"]["compile_s"] > 0
    assert rows["compile"]["floor_ratio"] > 0 and rows["compile"]["tokens_per_s"] > 0
    # the compiled step's cache is rounded up to 64 slots (so other lengths reuse its program)
    assert rows["compile"]["kv_cache_bytes"] == rows["eager"]["kv_cache_bytes"] * 64 // (4 + 11)


def test_bench_generate_refuses_what_it_cannot_time(capsys):
    vit = [str(ROOT / "specs" / "vit_ti16.yaml"), "--set", "img=32", "--set", "depth=1", "--set", "classes=10"]
    assert main(["bench", *vit, "--generate"]) == 1  # the spec: it cannot generate
    assert "cannot generate" in capsys.readouterr().err
    assert main(["bench", TINY_LM, *SETS, "--generate", "--new-tokens", "5"]) == 2
    assert main(["bench", TINY_LM, *SETS, "--generate", "--prompt", "0"]) == 2
    assert main(["bench", TINY_LM, *SETS, "--generate", "--precision", "int8"]) == 2
    assert main(["bench", TINY_LM, *SETS, "--generate", "--batch", "2"]) == 2
    assert main(["bench", TINY_LM, *SETS, "--generate", "--target", "onnx"]) == 2
    assert main(["bench", TINY_LM, *SETS, "--prompt", "4"]) == 2  # --prompt without --generate
    assert main(["bench", TINY_LM, *SETS, "--generate", "--prompt", "505", "--new-tokens", "11"]) == 2  # > 512
    err = capsys.readouterr().err
    assert "longest sequence" in err and "Traceback" not in err


def test_weight_matrices_count_a_tied_head_once_and_skip_position_tables():
    model = archspec.build(TINY_LM, overrides=SMALL).eval()
    found = weight_matrices(model)
    assert len({id(w) for w in found}) == len(found)
    shapes = [tuple(w.shape) for w in found]
    assert shapes.count((97, 32)) == 1  # the token table, once, as the tied head
    assert (512, 32) not in shapes  # the learned positions: a row read
    per_block = 4 + 2  # attention: q, k, v (or qkv) and proj; the MLP: two
    assert len(found) in (2 * per_block + 1, 2 * (per_block - 2) + 1)
    assert kv_cache_bytes(model, 1, 10, torch.float32) == 2 * 2 * 2 * 16 * 10 * 4


def test_positions_and_windows():
    early, late = positions(8, 64)
    assert (early, late) == (11, 69)
    steps = [100.0] + [float(k) for k in range(1, 64)]  # steps[k] feeds position 8 + k - 1
    assert around(steps, 8, early) == 3.0 and around(steps, 8, late) == 61.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_packed_floor_computes_the_products_the_plain_one_does(dtype):
    """The floor's second pass (weights packed for oneDNN) multiplies by the same matrices:
    its products equal F.linear's, so the faster of the two is a floor of the same work."""
    from archspec.compiler.inductor.matvec import packed_products

    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=generator).to(dtype) for n, k in ((48, 32), (32, 96), (1000, 32))]
    products = packed_products(weights)
    if products is None:
        pytest.skip("oneDNN is not available here")
    inputs = [torch.randn(1, w.shape[1], generator=generator).to(dtype) for w in weights]
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    for got, w, x in zip(products(inputs), weights, inputs):
        expected = torch.nn.functional.linear(x.float(), w.float())
        assert got.shape == (1, w.shape[0])
        assert float((got.float() - expected).abs().max()) <= tolerance * float(expected.abs().max())
