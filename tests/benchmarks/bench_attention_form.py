"""Which attention form an AOTInductor package should use on this CPU: short key rows written
out as products, exp and sums (compiler/modules/attention/form.py) or SDPA's fused kernel.

For each model and precision, two packages as `build --target aoti` makes them (dynamic batch
over the spec's range, frozen), one with every short row written out and one with none, and,
beside them, the same module under torch.compile with inductor's freezing at the static batch
(the JIT, "jit frozen": `archspec bench`'s compile target), timed in the same interleaved rounds
(medians, ranges). It prints written / sdpa per row, the largest difference between the two
packages' outputs, and how many SDPA calls each package makes (inductor may put the fused
kernel back: then both are one program). form.py's thresholds (WRITTEN_MAX_KEYS for bf16, WRITTEN_MAX_KEYS_AMX for bf16 on an AMX CPU,
WRITTEN_MAX_KEYS_FP32) come from these figures.

With --jit, no packages: the module under torch.compile with inductor's freezing (what `bench
--target compile` and a user's torch.compile run on the CPU), once with every short row written
out and once with none, each a copy of its own compiled and called with its form's thresholds.

    python tests/benchmarks/bench_attention_form.py --models swin_t pvt_v2_b2 --precisions fp32 bf16 \
        [--batches 1 8] [--rounds 5] [--threads 2] [--jit]

Packages are compiled once into --work (default /tmp/archspec-attention-form) and reused.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_vs_peers  # noqa: E402  (build)
from archspec.compiler.backends.bench import torch_runner  # noqa: E402
from archspec.compiler.backends.export import example_inputs  # noqa: E402
from archspec.compiler.backends.targets.aoti import compile_package, export_for_package, load_package  # noqa: E402
from archspec.compiler.modules.attention import form  # noqa: E402

FORMS = {"written": 1 << 30, "sdpa": 0}  # the longest key row written out, in both precisions


@contextlib.contextmanager
def thresholds(chosen: str):
    """form.py's thresholds as `chosen` (FORMS) has them, within."""
    kept = form.WRITTEN_MAX_KEYS, form.WRITTEN_MAX_KEYS_FP32, form.WRITTEN_MAX_KEYS_AMX
    form.WRITTEN_MAX_KEYS = form.WRITTEN_MAX_KEYS_FP32 = form.WRITTEN_MAX_KEYS_AMX = FORMS[chosen]
    try:
        yield
    finally:
        form.WRITTEN_MAX_KEYS, form.WRITTEN_MAX_KEYS_FP32, form.WRITTEN_MAX_KEYS_AMX = kept


def jit_runner(report, model, precision: str, chosen: str, batch: int):
    """A copy of `model` compiled frozen as `bench --target compile` does, with the thresholds of
    `chosen` at its compile and every call (dynamo guards on them: the two forms' compiles are told
    apart by them, and another value would compile it again)."""
    prepared = torch_runner(model, report.graph, precision, compiled=True, device="cpu")
    with thresholds(chosen):
        run = prepared.bind(batch)

    def call():
        with thresholds(chosen):
            return run()

    return call


def package(report, model, spec: str, precision: str, chosen: str, work: str):
    """The package of `model` with every short row written out ("written") or none ("sdpa")."""
    path = os.path.join(work, f"{spec}_{precision}_{chosen}.pt2")
    if not os.path.exists(path):
        with thresholds(chosen):
            started = time.perf_counter()
            span = (report.graph.dims["B"].lo, report.graph.dims["B"].hi)
            compile_package(export_for_package(model, report.graph, precision, span), path)
            print(f"{spec} {precision} {chosen}: compiled in {time.perf_counter() - started:.0f} s", flush=True)
    return load_package(path)


def sdpa_calls(path: str) -> int:
    """Lines of the package's C++ that call SDPA's CPU kernel."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        code = "".join(archive.read(n).decode(errors="replace") for n in archive.namelist() if n.endswith(".cpp"))
    return sum("scaled_dot_product" in line and "(" in line for line in code.splitlines())


def first(out) -> torch.Tensor:
    return (out[0] if isinstance(out, (list, tuple)) else out).float()


def measure(runners: dict, batch: int, rounds: int) -> dict:
    names, times = list(runners), {name: [] for name in runners}
    calls = 3 if batch == 1 else 1
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            runners[name]()
            started = time.perf_counter()
            for _ in range(calls):
                runners[name]()
            times[name].append((time.perf_counter() - started) / calls * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["swin_t", "swinv2_t", "pvt_v2_b2"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", default="/tmp/archspec-attention-form")
    parser.add_argument("--jit", action="store_true", help="torch.compile frozen in both forms, no packages")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    for spec in args.models:
        report, ours, _ = bench_vs_peers.build(spec)
        for precision in args.precisions:
            if args.jit:
                jit_rows(report, ours, spec, precision, args)
                continue
            packages = {chosen: package(report, ours, spec, precision, chosen, args.work) for chosen in FORMS}
            print(f"{spec} {precision}: SDPA calls in the package's code: " + ", ".join(
                f"{chosen} {sdpa_calls(os.path.join(args.work, f'{spec}_{precision}_{chosen}.pt2'))}" for chosen in FORMS))
            jit = torch_runner(ours, report.graph, precision, compiled=True, device="cpu")  # frozen: bench's compile
            for batch in args.batches:
                x = torch.randn(batch, *example_inputs(report.graph)[0].shape[1:])  # fp32, as the packages take
                runners = {chosen: (lambda p=p: p(x)) for chosen, p in packages.items()}
                runners["jit frozen"] = jit.bind(batch)
                times = measure(runners, batch, args.rounds)
                median = {name: statistics.median(t) for name, t in times.items()}
                gap = (first(runners["written"]()) - first(runners["sdpa"]())).abs().max().item()
                print(f"{spec} {precision} b{batch}: " + "  ".join(
                    f"{name} {median[name]:.1f} [{min(t):.1f}-{max(t):.1f}]" for name, t in times.items())
                    + f"  written/sdpa {median['written'] / median['sdpa']:.2f}  max|written - sdpa| {gap:.1e}",
                    flush=True)


def jit_rows(report, ours, spec: str, precision: str, args) -> None:
    """One line per batch: the frozen compile with every short row written out and with none."""
    for batch in args.batches:
        runners = {f"jit {chosen}": jit_runner(report, ours, precision, chosen, batch) for chosen in FORMS}
        times = measure(runners, batch, args.rounds)
        median = {name: statistics.median(t) for name, t in times.items()}
        print(f"{spec} {precision} b{batch}: " + "  ".join(
            f"{name} {median[name]:.1f} [{min(t):.1f}-{max(t):.1f}]" for name, t in times.items())
            + f"  written/sdpa {median['jit written'] / median['jit sdpa']:.2f}", flush=True)


if __name__ == "__main__":
    main()
