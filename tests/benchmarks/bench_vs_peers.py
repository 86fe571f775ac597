"""archspec's artifacts against every path a user would pick instead, in one process.

For each model: timm's own model (the same weights, copied into ours) run every way a user
would run it — timm eager, timm under torch.compile, on the CPU timm under torch.compile with
inductor's freezing (weights folded as constants, as archspec's package has them) and timm
exported with torch.onnx.export(dynamo=True) and run in ONNX Runtime (exported at the static
batch it is timed at, its best case); on a GPU timm under torch.compile with mode
"reduce-overhead" (CUDA graphs) and "max-autotune", and timm through torch.export and
AOTInductor (frozen, at the batch it is timed at) — against archspec's eager module, archspec under torch.compile
(on the CPU also with freezing, as timm's),
archspec's ONNX for ONNX Runtime (`export_onnx(optimize=True)`: one dynamic-batch file), and
archspec's AOTInductor package (`build --target aoti`: the export compiled to C++ kernels for
--threads threads, dynamic batch, loaded back with torch._inductor.aoti_load_package).
Then bf16 (eager and compile on both sides; ONNX Runtime has no bf16 CPU kernels) and int8
(archspec's ONNX with ONNX Runtime's dynamic quantization, against its fp32).

With --device cuda the same comparison runs on a CUDA GPU: timm's paths above against
archspec eager, compile, cudagraphs (`archspec bench --target cudagraphs`: torch.compile with
CUDA graphs, warmed up and recorded by archspec) and AOTInductor (the package compiled for the GPU), in fp16, bf16 or
fp32, batch 1, 8 and 64 by default; no ONNX Runtime (its CUDA provider is not installed here)
and no TensorRT (see README). Each call is synchronized, so a time is a forward's latency.

Every runner of one model and batch size is timed in the same interleaved rounds (order
rotating), with a 2048^3 matmul probe among them; medians, with the spread of the rounds. The
first line names the CPU and its extensions (AVX-512, AVX512-BF16, AMX): figures from another
machine are another kind of figure.
ONNX Runtime's intra-op spinning is off (DESIGN.md section 8). Prints tables of milliseconds
and ratios; `--json FILE` keeps everything; `--markdown` prints the README tables.

    nice python tests/benchmarks/bench_vs_peers.py --threads 2 [--models swin_t vit_b16] [--rounds 9]
    python tests/benchmarks/bench_vs_peers.py --device cuda --precisions bf16 fp16 --rounds 5 --deadline 480

Ratios below 1.0: archspec is faster. "best" is the fastest of each side's paths.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from archspec.compiler.backends.timing import synchronizer

ROOT = Path(__file__).resolve().parents[2]
MODELS = {  # spec: (timm name, image size)
    "vit_b16": ("vit_base_patch16_224", 224),
    "swin_t": ("swin_tiny_patch4_window7_224", 224),
    "swinv2_t": ("swinv2_tiny_window8_256", 256),
    "pvt_v2_b2": ("pvt_v2_b2", 224),
}
PEERS = ["timm eager", "timm compile", "timm compile frozen", "timm onnx", "timm compile reduce-overhead",
         "timm compile max-autotune", "timm aoti"]  # the best of those measured is the best peer
OURS = ["archspec eager", "archspec compile", "archspec compile frozen", "archspec cudagraphs", "archspec onnx",
        "archspec aoti"]
CPU_PATHS = {"timm eager", "timm compile", "timm compile frozen", "timm onnx", "archspec eager", "archspec compile",
             "archspec compile frozen", "archspec onnx", "archspec aoti"}
CUDA_PATHS = {"timm eager", "timm compile", "timm compile reduce-overhead", "timm compile max-autotune", "timm aoti",
              "archspec eager", "archspec compile", "archspec cudagraphs", "archspec aoti"}  # no ONNX Runtime CUDA provider here
CUDA_PROBE_SIZE = 8192  # a 2048^3 matmul is over in microseconds on a data-centre GPU: launch-bound
STARTED = time.perf_counter()


def target_ratio(row: dict) -> float | None:
    """Issue 38's bound on best archspec / best peer: on a GPU 0.85 at batch 1 and 8, 0.95 at 64;
    on the CPU in bf16 0.80 (an AMX machine's); fp32 on the CPU has none (no row worse than before)."""
    if row.get("device", "cpu").startswith("cuda"):
        return 0.95 if row["batch"] >= 64 else 0.85
    return 0.80 if row["precision"] == "bf16" else None


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


def aoti_runner(spec: str, precision: str, report, ours, x32: torch.Tensor, work: str, device: str = "cpu"):
    """archspec's AOTInductor package (as `build --target aoti` makes it, dynamic batch over the
    spec's range), compiled once per model, precision and device, fed fp32 as its callers do."""
    from archspec.compiler.backends.targets.aoti import compile_package, export_for_package, load_package

    path = aoti_path(work, spec, precision, device)
    if not os.path.exists(path):
        span = (report.graph.dims["B"].lo, report.graph.dims["B"].hi)
        log(f"{spec}: archspec AOTInductor package ({precision}, {device}); compiling takes minutes")
        started = time.perf_counter()
        compile_package(export_for_package(ours, report.graph, precision, span, device), path)
        log(f"  compiled in {time.perf_counter() - started:.0f} s")
    compiled = load_package(path)
    sync = synchronizer(device)

    def run():
        with torch.inference_mode():
            out = compiled(x32)
        sync()
        return out

    return run, lambda: run().float()


def timm_aoti_runner(spec: str, precision: str, reference, x: torch.Tensor, work: str, device: str):
    """What a user does to deploy timm through AOTInductor: torch.export at the batch they run,
    aoti_compile_and_package with freezing, aoti_load_package (not yet run on a GPU here: the
    H200 measured crashed loading any AOTInductor CUDA package, README)."""
    path = os.path.join(work, f"timm_{spec}_{precision}_{device}_b{x.shape[0]}.aoti.pt2")
    if not os.path.exists(path):
        started = time.perf_counter()
        with torch.inference_mode():
            program = torch.export.export(reference, (x,))
        with torch.no_grad():  # inductor freezes only with grad off: outside, "freezing" changed nothing
            torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs={"freezing": True})
        log(f"  timm AOTInductor package compiled in {time.perf_counter() - started:.0f} s")
    compiled = torch._inductor.aoti_load_package(path)
    return torch_runner(compiled, x, device)


def own_class(model):
    """`model` made the one instance of a subclass of its class, made here (see measure's `compiled`)."""
    model.__class__ = type(type(model).__name__, (type(model),), {"__module__": type(model).__module__})
    return model


def aoti_path(work: str, spec: str, precision: str, device: str) -> str:
    return os.path.join(work, f"archspec_{spec}_{precision}_{device}.aoti.pt2")


def cudagraphs_runner(ours, report, precision: str, x: torch.Tensor, device: str):
    """archspec's own `bench --target cudagraphs` runner: torch.compile with CUDA graphs, each
    batch size warmed up and recorded by archspec before timing (bench.torch_runner)."""
    from archspec.compiler.backends.registry import get

    prepared = get("cudagraphs").bench(ours, report.graph, precision, workdir="", threads=1, device=device)
    return prepared.bind(x.shape[0]), lambda: prepared.outputs((x,))[0].to(x.device)


def torch_runner(fn, x, device: str = "cpu"):
    sync = synchronizer(device)

    def run():
        with torch.inference_mode():
            out = fn(x)
        sync()
        return out

    return run, lambda: run().float()


def measure(spec: str, batch: int, precision: str, report, ours, reference, work: str, args) -> dict:
    from archspec.compiler.backends.onnx import export_onnx
    from archspec.compiler.backends.precision import DTYPES, quantize_onnx_int8
    from archspec.compiler.backends.timing import interleaved, matmul_probe, wait_for_quiet

    _, size = MODELS[spec]
    device, cuda = args.device, args.device.startswith("cuda")
    x32 = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0)).to(device)
    dtype = DTYPES[precision]
    x = x32.to(dtype)
    runners, outputs, failed = {}, {}, {}
    ours_m, ref_m = models_in(spec, precision, ours, reference, device)

    def add(label, make, costly: bool = False):
        if args.only and not any(word in label for word in args.only):
            return
        if costly and past_deadline(args):
            failed[label] = f"not measured: past --deadline {args.deadline:.0f} s"
            log(f"{spec} b{batch} {precision}: {label} {failed[label]}")
            return
        log(f"{spec} b{batch} {precision}: prepare {label}")
        try:
            runners[label], outputs[label] = make()
        except Exception as exc:  # noqa: BLE001 - a path that fails is reported, not fatal
            failed[label] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
            log(f"  failed: {failed[label]}")

    def compiled(model, mode: str | None = None, frozen: bool = False):
        """`model` under torch.compile (`mode`: "reduce-overhead", "max-autotune"; `frozen`: with
        inductor's freezing, weights folded as constants), compiled at its first call.

        On the CPU every path compiles its own copy of the model, of a class of its own (dynamo
        keeps compiled code per function and guards a module by its class: a copy of the same
        class ran the plain compile's code, so "timm compile frozen" ran unfrozen, 160 ms at
        vit_b16 b1 fp32 against 128 alone), and is called under the settings it compiled with;
        nothing is reset between paths (a reset made every earlier path recompile at its first
        timed call, as whatever config was then in force)."""
        import contextlib

        from torch._dynamo import config as dynamo_config
        from torch._inductor import config as inductor_config

        if cuda and not frozen:  # one compiled function per model, mode and precision, reused across batches
            fn = COMPILED.get((id(model), mode))
            if fn is None:  # no dynamo reset: it would drop the other side's compiled code
                fn = COMPILED[id(model), mode] = torch.compile(model, mode=mode)  # batch 1, then dynamic batch
            own = contextlib.nullcontext
        else:
            fn = torch.compile(own_class(copy.deepcopy(model)), mode=mode, dynamic=False)

            def own():
                stack = contextlib.ExitStack()
                stack.enter_context(inductor_config.patch(freezing=frozen))
                stack.enter_context(dynamo_config.patch(recompile_limit=64))
                return stack
        started = time.perf_counter()
        with own(), torch.inference_mode():
            for _ in range(3 if mode == "reduce-overhead" else 1):  # CUDA graphs are recorded at the 2nd-3rd call
                fn(x)  # compile before timing
        synchronizer(device)()
        log(f"  compiled in {time.perf_counter() - started:.0f} s")

        def call(inputs):
            with own():
                return fn(inputs)

        return torch_runner(call, x, device)

    add("timm eager", lambda: torch_runner(ref_m, x, device))
    add("archspec eager", lambda: torch_runner(ours_m, x, device))
    if not args.no_compile:
        add("timm compile", lambda: compiled(ref_m), costly=True)
        add("archspec compile", lambda: compiled(ours_m), costly=True)
        if cuda:
            add("timm compile reduce-overhead", lambda: compiled(ref_m, mode="reduce-overhead"), costly=True)
            add("timm compile max-autotune", lambda: compiled(ref_m, mode="max-autotune"), costly=True)
            add("archspec cudagraphs", lambda: cudagraphs_runner(ours, report, precision, x, device), costly=True)
        else:
            add("timm compile frozen", lambda: compiled(ref_m, frozen=True), costly=True)
            add("archspec compile frozen", lambda: compiled(ours_m, frozen=True), costly=True)
    if not args.no_aoti and cuda:
        add("timm aoti", lambda: timm_aoti_runner(spec, precision, ref_m, x, work, device), costly=True)
    if not args.no_aoti:
        add("archspec aoti", lambda: aoti_runner(spec, precision, report, ours, x32, work, device),
            costly=not os.path.exists(aoti_path(work, spec, precision, device)))  # compiled once per precision
    if precision == "fp32" and not cuda:
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
    probe_size = CUDA_PROBE_SIZE if cuda else 2048
    probe, flops = matmul_probe(size=probe_size, dtype=dtype, device=device)
    runners["probe"] = probe
    work = {"probe": flops}
    if dtype != torch.float32 and not cuda:  # the --quiet check reads an fp32 probe, whatever the block's precision
        runners["probe fp32"], work["probe fp32"] = matmul_probe(dtype=torch.float32)
    with torch.inference_mode():
        reference_out = reference.to(device)(x32).float()
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
    row = {"spec": spec, "batch": batch, "precision": precision, "device": device, "failed": failed,
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


def gpu_description() -> str:
    """The GPU, its memory and the torch and CUDA versions, for the table's caption."""
    props = torch.cuda.get_device_properties(0)
    return (f"{props.name}, {props.total_memory / 2**30:.0f} GiB, compute capability {props.major}.{props.minor}, "
            f"{props.multi_processor_count} SMs; torch {torch.__version__}, CUDA {torch.version.cuda}")


COPIES: dict = {}  # (spec, precision, device) -> (archspec model, timm model) in that precision there
COMPILED: dict = {}  # (id(model), mode) -> its torch.compile function (CUDA runs)


def models_in(spec: str, precision: str, ours, reference, device: str):
    """archspec's and timm's models in `precision` on `device`: copies, made once per model and
    precision (the fp32 models themselves in fp32), the last precision's copies let go."""
    from archspec.compiler.backends.precision import DTYPES

    key = (spec, precision, device)
    if key not in COPIES:
        for old in [k for k in COPIES if k[0] == spec]:
            for model in COPIES.pop(old):
                for key in [k for k in COMPILED if k[0] == id(model)]:
                    COMPILED.pop(key)
        if precision == "fp32":
            COPIES[key] = (ours.to(device), reference.to(device))
        else:
            dtype = DTYPES[precision]
            COPIES[key] = tuple(copy.deepcopy(m).to(dtype).to(device).eval() for m in (ours, reference))
    return COPIES[key]


def past_deadline(args) -> bool:
    """Whether the run is past --deadline (seconds since it started): compiling stops there, so a
    run on a lent GPU ends in time with every eager row measured."""
    return args.deadline is not None and time.perf_counter() - STARTED > args.deadline


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


def milliseconds(value: float) -> str:
    """A median in ms to about three figures (GPU rows are a few ms, CPU rows tens to thousands)."""
    return f"{value:.0f}" if value >= 20 else f"{value:.1f}" if value >= 2 else f"{value:.2f}"


def complete(row: dict) -> bool:
    """Whether every path of the row was measured (none skipped at --deadline)."""
    return not any(why.startswith("not measured") for why in row["failed"].values())


def markdown(rows: list[dict], header: str) -> str:
    cuda = any(row.get("device", "cpu").startswith("cuda") for row in rows)
    columns = [p for p in PEERS + OURS if p in (CUDA_PATHS if cuda else CPU_PATHS)]  # an unmeasured one shows —
    titles = {"timm onnx": "timm → ORT", "archspec onnx": "archspec ORT", "archspec aoti": "archspec AOTI",
              "timm aoti": "timm AOTI", "timm compile reduce-overhead": "timm CUDA graphs"}
    cells = lambda row: [milliseconds(row['paths'][n]['median_ms']) if n in row["paths"] else "—"  # noqa: E731
                         for n in columns]
    out = [header, "",
           "| model | batch | prec | " + " | ".join(titles.get(c, c) for c in columns)
           + " | best archspec / best peer | target | archspec eager / timm eager | best archspec, % of probe |",
           "|---|---|---|" + "---|" * (len(columns) + 4)]
    for row in rows:
        share = (f"{100 * row['paths'][row['best_ours'][1]]['probe_share']:.0f}%"
                 if row.get("best_ours", (None, None))[1] else "—")
        ratio = f"**{row['best_ratio']:.2f}** ({row['best_ours'][1].removeprefix('archspec ')})" if "best_ratio" in row else "—"
        eager = f"{row['eager_ratio']:.2f}" if "eager_ratio" in row else "—"
        bound = target_ratio(row)
        target = "—" if "best_ratio" not in row or bound is None else (
            f"≤ {bound:.2f} {'met' if row['best_ratio'] <= bound else 'missed'}")
        if not complete(row):  # a best of what happened to be measured is no best
            ratio, target = "—", "not all paths measured"
        out.append(f"| {row['spec']} | {row['batch']} | {row['precision']} | "
                   + " | ".join(cells(row))
                   + f" | {ratio} | {target} | {eager} | {share} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, help="default 1 8 (CPU), 1 8 64 (CUDA)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16", "fp16"],
                        help="fp16 with --device cuda only")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where every path runs (cuda: no ONNX Runtime paths)")
    parser.add_argument("--deadline", type=float, metavar="SECONDS",
                        help="compile nothing more after this many seconds (rows still timed eagerly)")
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
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    if args.device == "cpu" and "fp16" in args.precisions:
        parser.error("fp16 runs on CUDA (--device cuda); on a CPU use bf16")
    args.batches = args.batches or ([1, 8, 64] if args.device == "cuda" else [1, 8])
    torch.set_num_threads(args.threads)
    from archspec.core.isa import read_isa
    from archspec.compiler.backends.timing import machine_description, reuse_freed_memory

    machine, isa = machine_description(), read_isa()
    print(f"CPU: {isa.line()}", flush=True)
    if args.device == "cuda":
        machine = gpu_description()
        print(f"GPU: {machine}", flush=True)
    malloc = "glibc malloc tuned to reuse freed memory" if args.malloc_reuse and reuse_freed_memory() else \
        "default malloc"
    print(f"{machine}; {args.threads} threads; {args.rounds} interleaved rounds; {malloc}; "
          f"{datetime.date.today().isoformat()}", flush=True)
    rows, built = [], {}
    with tempfile.TemporaryDirectory(prefix="archspec-peers-") as work:
        for precision in args.precisions:  # every model in the first precision before the next
            for spec in args.models:
                if spec not in built:
                    log(f"{spec}: build timm and archspec (timm's weights in both)")
                    try:
                        built[spec] = build(spec)
                    except Exception as exc:  # noqa: BLE001 - one model that cannot be built; the others run
                        built[spec] = None
                        log(f"  failed: {type(exc).__name__}: {str(exc).strip()[:300]}")
                if built[spec] is None:
                    continue
                report, ours, reference = built[spec]
                for batch in args.batches:
                    row = measure(spec, batch, precision, report, ours, reference, work, args)
                    rows.append(row)
                    print_row(row)
                    if args.json:
                        with open(args.json, "w") as f:
                            json.dump({"machine": machine, "isa": isa.to_json(), "threads": args.threads,
                                       "rounds": args.rounds, "malloc": malloc, "device": args.device,
                                       "date": datetime.date.today().isoformat(), "rows": rows}, f, indent=1)
    if args.markdown:
        for precision in args.precisions:
            print("\n" + markdown([r for r in rows if r["precision"] == precision],
                                  f"{precision}, median ms per forward"))
    ratios = [r["best_ratio"] for r in rows if "best_ratio" in r and complete(r)]
    if ratios:
        print(f"\nbest archspec / best peer: geometric mean {statistics.geometric_mean(ratios):.3f} over "
              f"{len(ratios)} rows with every path measured")


if __name__ == "__main__":
    main()
