"""archspec's artifacts against every path a user would pick instead, in one process.

For each model: timm's own model (the same weights, copied into ours) run three ways a user
would run it — timm eager, timm under torch.compile, timm exported with
torch.onnx.export(dynamo=True) and run in ONNX Runtime (exported at the static batch it is
timed at, its best case) — against archspec's eager module, archspec under torch.compile,
archspec's ONNX for ONNX Runtime (`export_onnx(optimize=True)`: one dynamic-batch file), and
archspec's AOTInductor package (`build --target aoti`: the export compiled to C++ kernels for
--threads threads, dynamic batch, loaded back with torch._inductor.aoti_load_package).
Then bf16 (eager and compile on both sides; ONNX Runtime has no bf16 CPU kernels) and int8
(archspec's ONNX with ONNX Runtime's dynamic quantization, against its fp32).

Every runner of one model and batch size is timed in the same interleaved rounds (order
rotating), with a 2048^3 matmul probe among them; medians, with the spread of the rounds. The
first line names the CPU and its extensions (AVX-512, AVX512-BF16, AMX): figures from another
machine are another kind of figure.
ONNX Runtime's intra-op spinning is off (DESIGN.md section 8). Prints tables of milliseconds
and ratios; `--json FILE` keeps everything; `--markdown` prints the README tables.

    nice python tests/benchmarks/bench_vs_peers.py --threads 2 [--models swin_t vit_b16] [--rounds 9]

Ratios below 1.0: archspec is faster. "best" is the fastest of each side's paths.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
MODELS = {  # spec: (timm name, image size)
    "vit_b16": ("vit_base_patch16_224", 224),
    "swin_t": ("swin_tiny_patch4_window7_224", 224),
    "swinv2_t": ("swinv2_tiny_window8_256", 256),
    "pvt_v2_b2": ("pvt_v2_b2", 224),
}
PEERS = ["timm eager", "timm compile", "timm onnx"]
OURS = ["archspec eager", "archspec compile", "archspec onnx", "archspec aoti"]
TARGET_RATIO = 0.70  # issue 21: the best archspec artifact at most 0.70x the best peer, on every row


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def build(spec: str):
    import timm

    import archspec
    from archspec.compiler.weights.load import load_weights

    name, _ = MODELS[spec]
    reference = timm.create_model(name, pretrained=False).eval()
    report = archspec.check(str(ROOT / "specs" / f"{spec}.yaml"))
    from archspec.compiler.lower import lower

    ours = lower(report.graph, seed=0).eval()
    load_weights(ours, reference.state_dict(), report.graph)
    return report, ours, reference


def timm_onnx(reference, x: torch.Tensor, path: str) -> str:
    """What a user does: torch.onnx.export(dynamo=True) at the batch they run (static)."""
    with torch.no_grad():
        torch.onnx.export(reference, (x,), path, dynamo=True, external_data=False, verbose=False)
    return path


def ort_runner(path: str, x: torch.Tensor, threads: int):
    from archspec.compiler.backends.timing import onnxruntime_session

    session = onnxruntime_session(path, threads=threads)
    name = session.get_inputs()[0].name
    feeds = {name: x.numpy()}
    return lambda: session.run(None, feeds), lambda: torch.from_numpy(session.run(None, feeds)[0])


def aoti_runner(spec: str, precision: str, report, ours, x32: torch.Tensor, work: str):
    """archspec's AOTInductor package (as `build --target aoti` makes it, dynamic batch over the
    spec's range), compiled once per model and precision, fed fp32 as its callers do."""
    from archspec.compiler.backends.targets.aoti import compile_package, export_for_package, load_package

    path = os.path.join(work, f"archspec_{spec}_{precision}.aoti.pt2")
    if not os.path.exists(path):
        span = (report.graph.dims["B"].lo, report.graph.dims["B"].hi)
        log(f"{spec}: archspec AOTInductor package ({precision}); compiling C++ takes minutes")
        started = time.perf_counter()
        compile_package(export_for_package(ours, report.graph, precision, span), path)
        log(f"  compiled in {time.perf_counter() - started:.0f} s")
    compiled = load_package(path)

    def run():
        with torch.inference_mode():
            return compiled(x32)

    return run, lambda: run().float()


def torch_runner(fn, x):
    def run():
        with torch.inference_mode():
            return fn(x)

    return run, lambda: run().float()


def measure(spec: str, batch: int, precision: str, report, ours, reference, work: str, args) -> dict:
    from archspec.compiler.backends.onnx import export_onnx
    from archspec.compiler.backends.precision import quantize_onnx_int8
    from archspec.compiler.backends.timing import interleaved, matmul_probe, wait_for_quiet

    _, size = MODELS[spec]
    x32 = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    x = x32.to(dtype)
    runners, outputs, failed = {}, {}, {}
    if precision == "bf16":
        import copy

        ours_m, ref_m = copy.deepcopy(ours).to(dtype).eval(), copy.deepcopy(reference).to(dtype).eval()
    else:
        ours_m, ref_m = ours, reference

    def add(label, make):
        if args.only and not any(word in label for word in args.only):
            return
        log(f"{spec} b{batch} {precision}: prepare {label}")
        try:
            runners[label], outputs[label] = make()
        except Exception as exc:  # noqa: BLE001 - a path that fails is reported, not fatal
            failed[label] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
            log(f"  failed: {failed[label]}")

    def compiled(model):
        torch._dynamo.reset()
        fn = torch.compile(model, dynamic=False)
        with torch.inference_mode():
            fn(x)  # compile before timing
        return torch_runner(fn, x)

    add("timm eager", lambda: torch_runner(ref_m, x))
    add("archspec eager", lambda: torch_runner(ours_m, x))
    if not args.no_compile:
        add("timm compile", lambda: compiled(ref_m))
        add("archspec compile", lambda: compiled(ours_m))
    if not args.no_aoti:
        add("archspec aoti", lambda: aoti_runner(spec, precision, report, ours, x32, work))
    if precision == "fp32":
        add("timm onnx", lambda: ort_runner(timm_onnx(ref_m, x, os.path.join(work, f"timm_{spec}_b{batch}.onnx")),
                                            x, args.threads))
        ours_path = os.path.join(work, f"archspec_{spec}.onnx")
        if not os.path.exists(ours_path):
            log(f"{spec}: archspec ONNX (optimize=True)")
            result = export_onnx(ours, report.graph, ours_path, verify=False, optimize=True)
            log(f"  {result.summary()}")
        add("archspec onnx", lambda: ort_runner(ours_path, x, args.threads))
        if args.int8:
            int8_path = os.path.join(work, f"archspec_{spec}.int8.onnx")
            if not os.path.exists(int8_path):
                quantize_onnx_int8(ours_path, int8_path)
            add("archspec onnx int8", lambda: ort_runner(int8_path, x, args.threads))
    probe, flops = matmul_probe(dtype=dtype)
    runners["probe"] = probe
    work = {"probe": flops}
    if dtype != torch.float32:  # the --quiet check reads an fp32 probe, whatever the block's precision
        runners["probe fp32"], work["probe fp32"] = matmul_probe(dtype=torch.float32)
    with torch.inference_mode():
        reference_out = reference(x32).float()
    for attempt in range(args.retries + 1):
        if args.quiet:
            wait_for_quiet(args.quiet * 1e9, args.max_wait, log=log)
        log(f"{spec} b{batch} {precision}: timing {len(runners)} runners, {args.rounds} rounds")
        with torch.inference_mode():
            timings = interleaved(runners, rounds=args.rounds, work=work, memory=False)
        rate = timings["probe fp32" if "probe fp32" in timings else "probe"].rate / 1e9
        if not args.quiet or rate >= 0.85 * args.quiet or attempt == args.retries:
            break
        log(f"  the machine got busy during the rounds (fp32 probe {rate:.0f} GFLOP/s): again")
    gaps = {}
    for label, get in outputs.items():
        with torch.inference_mode():
            out = get().float()
        gaps[label] = float((out - reference_out).abs().max())
    model_flops = report.flops * batch
    row = {"spec": spec, "batch": batch, "precision": precision, "failed": failed,
           "probe_gflops": timings["probe"].rate / 1e9,
           "paths": {label: {"median_ms": t.median * 1e3, "min_ms": t.low * 1e3, "max_ms": t.high * 1e3,
                             "spread": t.spread, "probe_share": model_flops / t.median / timings["probe"].rate,
                             "max_abs_vs_timm_fp32": gaps.get(label)}
                     for label, t in timings.items() if not label.startswith("probe")}}
    paths = row["paths"]
    best = lambda names: min((paths[n]["median_ms"], n) for n in names if n in paths) if any(  # noqa: E731
        n in paths for n in names) else (None, None)
    row["best_peer"], row["best_ours"] = best(PEERS), best(OURS)
    if row["best_peer"][0] and row["best_ours"][0]:
        row["best_ratio"] = row["best_ours"][0] / row["best_peer"][0]
    if "timm eager" in paths and "archspec eager" in paths:
        row["eager_ratio"] = paths["archspec eager"]["median_ms"] / paths["timm eager"]["median_ms"]
    return row


def print_row(row: dict) -> None:
    print(f"\n{row['spec']} batch {row['batch']} {row['precision']} (probe {row['probe_gflops']:.0f} GFLOP/s)")
    for label, p in sorted(row["paths"].items(), key=lambda kv: kv[1]["median_ms"]):
        gap = p["max_abs_vs_timm_fp32"]
        print(f"  {label:20} {p['median_ms']:9.1f} ms  [{p['min_ms']:.1f}-{p['max_ms']:.1f}]  "
              f"{100 * p['probe_share']:4.0f}% of probe  max|out - timm fp32| {gap:.1e}")
    for label, why in row["failed"].items():
        print(f"  {label:20} failed: {why}")
    if "best_ratio" in row:
        print(f"  best archspec ({row['best_ours'][1]}) / best peer ({row['best_peer'][1]}): {row['best_ratio']:.3f}")
    if "eager_ratio" in row:
        print(f"  archspec eager / timm eager: {row['eager_ratio']:.3f}")
    sys.stdout.flush()


def markdown(rows: list[dict], header: str) -> str:
    cells = lambda row, names: [f"{row['paths'][n]['median_ms']:.0f}" if n in row["paths"] else "—"  # noqa: E731
                                for n in names]
    out = [header, "",
           "| model | batch | prec | timm eager | timm compile | timm → ORT | archspec eager | archspec compile "
           "| archspec ORT | archspec AOTI | best archspec / best peer | target ≤ 0.70 | archspec eager / timm eager "
           "| best archspec, % of probe |",
           "|---|---|---|" + "---|" * 11]
    for row in rows:
        share = (f"{100 * row['paths'][row['best_ours'][1]]['probe_share']:.0f}%"
                 if row.get("best_ours", (None, None))[1] else "—")
        ratio = f"**{row['best_ratio']:.2f}** ({row['best_ours'][1].split()[1]})" if "best_ratio" in row else "—"
        eager = f"{row['eager_ratio']:.2f}" if "eager_ratio" in row else "—"
        target = ("met" if row["best_ratio"] <= TARGET_RATIO else "missed") if "best_ratio" in row else "—"
        out.append(f"| {row['spec']} | {row['batch']} | {row['precision']} | "
                   + " | ".join(cells(row, PEERS[:2]) + [cells(row, PEERS[2:])[0]] + cells(row, OURS))
                   + f" | {ratio} | {target} | {eager} | {share} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out (saves compile time)")
    parser.add_argument("--no-aoti", action="store_true",
                        help="leave archspec's AOTInductor package out (saves minutes of C++ compiling)")
    parser.add_argument("--int8", action="store_true", help="also archspec's ONNX with int8 dynamic quantization")
    parser.add_argument("--only", nargs="+", help="only paths whose label contains one of these words")
    parser.add_argument("--quiet", type=float, default=0.0, metavar="GFLOPS",
                        help="time a block only when the fp32 matmul probe reaches this rate (the cores are not "
                             "shared at the moment), and time it again if the rate fell during the rounds")
    parser.add_argument("--max-wait", type=float, default=900.0, help="seconds to wait for --quiet (default 900)")
    parser.add_argument("--retries", type=int, default=2, help="re-timings of a block the machine disturbed")
    parser.add_argument("--malloc-reuse", action="store_true",
                        help="glibc: keep freed memory for reuse (no page faults on eager's large temporaries); "
                             "process-wide, so it applies to every path alike")
    parser.add_argument("--json", help="write every measurement to this file")
    parser.add_argument("--markdown", action="store_true", help="print the README tables at the end")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from archspec.compiler.backends.isa import read_isa
    from archspec.compiler.backends.timing import machine_description, reuse_freed_memory

    machine, isa = machine_description(), read_isa()
    print(f"CPU: {isa.line()}", flush=True)
    malloc = "glibc malloc tuned to reuse freed memory" if args.malloc_reuse and reuse_freed_memory() else \
        "default malloc"
    print(f"{machine}; {args.threads} threads; {args.rounds} interleaved rounds; {malloc}; "
          f"{datetime.date.today().isoformat()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="archspec-peers-") as work:
        for spec in args.models:
            log(f"{spec}: build timm and archspec (timm's weights in both)")
            report, ours, reference = build(spec)
            for precision in args.precisions:
                for batch in args.batches:
                    row = measure(spec, batch, precision, report, ours, reference, work, args)
                    rows.append(row)
                    print_row(row)
                    if args.json:
                        with open(args.json, "w") as f:
                            json.dump({"machine": machine, "isa": isa.to_json(), "threads": args.threads,
                                       "rounds": args.rounds, "malloc": malloc,
                                       "date": datetime.date.today().isoformat(), "rows": rows}, f, indent=1)
            del ours, reference
    if args.markdown:
        for precision in args.precisions:
            print("\n" + markdown([r for r in rows if r["precision"] == precision],
                                  f"{precision}, median ms per forward"))
    ratios = [r["best_ratio"] for r in rows if "best_ratio" in r]
    if ratios:
        print(f"\nbest archspec / best peer: geometric mean {statistics.geometric_mean(ratios):.3f} over "
              f"{len(ratios)} rows")


if __name__ == "__main__":
    main()
