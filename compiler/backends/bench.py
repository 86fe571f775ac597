"""What `archspec bench` measures: one built model on several targets (eager, torch.compile,
ONNX Runtime, TensorRT) and precisions, timed side by side in one process (timing.py:
interleaved rounds, medians and ranges, a matmul probe in the same rounds), with each
lower-precision or exported variant's deviation from fp32 eager.

    variants = [Variant("eager", "fp32"), Variant("onnx", "fp32"), Variant("onnx", "int8")]
    result = run_bench(model, graph, report.flops, variants, batches=[1, 8], threads=2)
    print(result.table())

Above the rows: the CPU and its extensions (isa.py: AVX-512, AVX512-BF16, AMX), since a
share of the probe on a machine with AMX is not the same figure as one on a machine without.
Each row's "% probe" is the model's FLOP rate (the spec's FLOPs per sample x batch / median
time) as a percentage of the matmul probe of its own precision (bf16 rows: the bf16 probe).

A variant that cannot run here (TensorRT without a CUDA GPU, bf16 in ONNX Runtime on a CPU)
becomes a row that says why, not a failure. Each target makes its own runner (`Target.bench`,
compiler/backends/targets/); this module times them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable

import torch

from archspec.core.ir import Graph

from .export import example_inputs, max_abs_difference
from archspec.core.isa import Isa, read_isa
from .out_of_memory import ran_out_of_memory
from .precision import DTYPES, cast_model, measure_deviation
from .registry import get as get_target, targets
from .timing import Timing, interleaved, machine_description, matmul_probe, synchronizer


PROBE_PRECISIONS = ("fp32", "bf16", "fp16")  # the probes there are; int8 rows are read against fp32


def probe_precision(precision: str) -> str:
    """The matmul probe a row of `precision` is read against: its own dtype, fp32 for int8."""
    return precision if precision in PROBE_PRECISIONS else "fp32"


def probe_share(flops: float, seconds: float, probe_rate: float | None) -> float | None:
    """The model's FLOP rate (`flops` per call, `seconds` per call) as a share of the probe's
    rate (FLOP/s); None when any of them is missing or zero."""
    if not flops or not seconds or not probe_rate:
        return None
    return flops / seconds / probe_rate


class Unavailable(Exception):
    """A variant that cannot run on this machine; the message says why."""


@dataclass(frozen=True)
class Variant:
    target: str
    precision: str = "fp32"

    @property
    def label(self) -> str:
        return f"{self.target} {self.precision}"


@dataclass
class Row:
    variant: Variant
    batch: int
    timing: Timing | None = None
    status: str = "ok"  # or why it did not run
    flops: float = 0.0  # per call
    probe_rate: float | None = None  # FLOP/s of the probe of the same dtype, same rounds
    deviation: str | None = None
    deviation_json: dict | None = None

    @property
    def share(self) -> float | None:
        return None if self.timing is None else probe_share(self.flops, self.timing.median, self.probe_rate)

    def to_json(self) -> dict:
        out = {"target": self.variant.target, "precision": self.variant.precision, "batch": self.batch,
               "status": self.status, "deviation": self.deviation_json}
        if self.timing is not None:
            out.update(self.timing.to_json())
            out["samples_per_s"] = self.batch / self.timing.median
            out["probe_share"] = self.share
            out["probe_percent"] = None if self.share is None else 100 * self.share
            out["probe_precision"] = probe_precision(self.variant.precision)
        return out


@dataclass
class BenchResult:
    rows: list[Row]
    threads: int
    rounds: int
    machine: str
    probes: dict[str, float] = field(default_factory=dict)  # dtype -> median FLOP/s, per batch averaged
    notes: list[str] = field(default_factory=list)
    isa: Isa = field(default_factory=read_isa)  # the CPU and its extensions

    def table(self, title: str | None = None) -> str:
        """The CPU line first, then `title` (the spec and its FLOPs), the rows, the probes, notes."""
        lines = [f"CPU: {self.isa.line()}", *([title] if title else []),
                 f"{self.machine}; {self.threads} threads, {self.rounds} interleaved rounds, median per call",
                 f"{'target':9} {'prec':5} {'batch':>5} {'median ms':>10} {'range ms':>17} {'samples/s':>10} "
                 f"{'peak MB':>8} {'% probe':>7}  deviation from fp32 eager"]
        skipped: dict[str, list[str]] = {}
        for r in self.rows:
            v = r.variant
            if r.timing is None:
                labels = skipped.setdefault(r.status, [])
                if v.label not in labels:
                    labels.append(v.label)
                continue
            t = r.timing
            peak = "-" if t.peak_bytes is None else f"{t.peak_bytes / 2**20:.0f}"
            share = "-" if r.share is None else f"{100 * r.share:.0f}%"
            lines.append(f"{v.target:9} {v.precision:5} {r.batch:5d} {t.median * 1e3:10.2f} "
                         f"{f'{t.low * 1e3:.2f}-{t.high * 1e3:.2f}':>17} {r.batch / t.median:10.1f} {peak:>8} "
                         f"{share:>7}  {r.deviation or ''}")
        for dtype, rate in self.probes.items():
            lines.append(f"matmul probe (2048^3 {dtype}, same rounds): {rate / 1e9:.0f} GFLOP/s; '% probe' of the "
                         f"{dtype} rows is the model's FLOP rate as a percentage of it")
        lines += [f"not run: {', '.join(labels)}: {reason}" for reason, labels in skipped.items()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"isa": self.isa.to_json(), "machine": self.machine, "threads": self.threads, "rounds": self.rounds,
                "probe_gflops": {k: v / 1e9 for k, v in self.probes.items()},
                "rows": [r.to_json() for r in self.rows], "notes": self.notes}


# -- building the runners ---------------------------------------------------------------------------------


class Prepared:
    """One variant made ready: `bind(batch)` -> a no-argument callable that runs one forward
    on fixed inputs; `outputs(args)` -> its outputs for fp32 inputs (for the deviation)."""

    def __init__(self, bind: Callable[[int], Callable[[], object]], outputs: Callable[[tuple], object],
                 note: str | None = None):
        self.bind, self.outputs, self.note = bind, outputs, note


def prepare(variant: Variant, model: torch.nn.Module, graph: Graph, workdir: str, threads: int,
            device: str = "cpu") -> Prepared:
    """The variant's target made ready (targets/); raises Unavailable when it cannot run here:
    the target is missing something, or the precision does not run at it."""
    try:
        target = get_target(variant.target)
    except KeyError:
        names = ", ".join(t.name for t in targets("bench"))
        raise Unavailable(f"unknown target {variant.target!r} ({names})") from None
    available = target.availability()
    if not available.usable:
        raise Unavailable(available.reason)
    reason = target.precision_reason(variant.precision, device)
    if reason is not None:
        raise Unavailable(reason)
    return target.bench(model, graph, variant.precision, workdir=workdir, threads=threads, device=device)


def bench_inputs(graph: Graph, batch: int, dtype: torch.dtype | None = None, device: str = "cpu") -> tuple:
    args = example_inputs(graph, batch=batch)
    return tuple((a.to(dtype) if dtype is not None and a.is_floating_point() else a).to(device) for a in args)


def torch_runner(model, graph: Graph, precision: str, compiled: bool, device: str, mode: str | None = None
                 ) -> Prepared:
    """The module (a copy cast to `precision`, run through torch.compile when `compiled`, in
    torch.compile's `mode`) on `device`: eager and torch.compile, and the fp32 reference the
    others are measured against. On the CPU the compiled module runs frozen (compiled_settings),
    as one compiles for inference. With mode="reduce-overhead" (CUDA graphs) each batch size is
    called WARM_CALLS times before timing: torch compiles at the first call, records the graph at
    a later one, and replays it from then on."""
    dtype = DTYPES.get(precision, torch.float32)
    module = model if precision == "fp32" else cast_model(model, precision)
    module = module.to(device).eval()
    fn = torch.compile(module, dynamic=False, mode=mode) if compiled else module
    warm_calls = WARM_CALLS if mode == "reduce-overhead" else 1
    settings = compiled_settings(compiled, device)
    # The timed calls: on the CPU under the settings compiled with (freezing); on a GPU without
    # the recompile limit's patch, whose 20-30 us a call would weigh on a replayed graph's time.
    timed_settings = settings if device == "cpu" else contextlib.nullcontext
    sync = synchronizer(device)

    def bind(batch: int):
        args = bench_inputs(graph, batch, dtype, device)
        with settings(), torch.inference_mode():
            for _ in range(warm_calls):
                fn(*args)  # compiles for this batch size (torch.compile; records its CUDA graph) before any timing

        def run():
            with timed_settings(), torch.inference_mode():
                fn(*args)
            sync()

        return run

    def outputs(args):
        with settings(), torch.inference_mode():
            out = fn(*(a.to(dtype).to(device) if a.is_floating_point() else a.to(device) for a in args))
        out = out if isinstance(out, (tuple, list)) else (out,)
        return tuple(o.float().cpu() for o in out)

    return Prepared(bind, outputs)


# Calls of each batch size before timing under CUDA graphs: torch's CUDA graph trees run the
# compiled code once as a warm-up, record the graph at the next call and replay it after.
WARM_CALLS = 3

# Compiles dynamo may make of one function before it runs it uncompiled: every archspec model's
# forward is model.py's __call__, so each precision and batch size of a bench is another compile
# of the same function, and dynamo's default of 8 ran the rest eager, timed as "compile" rows
# (vit_ti16 at 5 batch sizes in fp32 and bf16: from the 8th, slower than eager).
BENCH_RECOMPILES = 256


def compiled_settings(compiled: bool, device: str) -> Callable:
    """The settings a compiled module is compiled and called under (the same at every call:
    another setting would compile it again): room for every variant's compile
    (BENCH_RECOMPILES) and, on the CPU, inductor's freezing (the weights folded as constants,
    each linear's packed once): archspec's vit_b16, swin_t, swinv2_t and pvt_v2_b2 took
    0.77-0.84x the time of a plain compile at batch 1 in fp32, 0.87-0.98x at batch 8 (Intel
    Xeon, 2 threads, tests/benchmarks/results/bench_vs_peers_fp32_xeon_2026-11-29_stop46.txt)."""
    if not compiled:
        return contextlib.nullcontext
    from torch._dynamo import config as dynamo_config
    from torch._inductor import config as inductor_config

    def settings():
        stack = contextlib.ExitStack()
        stack.enter_context(dynamo_config.patch(recompile_limit=BENCH_RECOMPILES))
        if device == "cpu":
            stack.enter_context(inductor_config.patch(freezing=True))
        return stack

    return settings


# -- the whole bench --------------------------------------------------------------------------------------


def is_reference(variant: Variant, device: str) -> bool:
    """The variant the others are measured against (eager fp32 on the CPU): no deviation of its own."""
    return variant.precision == "fp32" and device == "cpu" and get_target(variant.target).is_reference


def run_bench(model: torch.nn.Module, graph: Graph, flops_per_sample: float, variants: list[Variant],
              batches: list[int], threads: int | None = None, rounds: int = 9, device: str = "cpu",
              samples: int = 32, log: Callable[[str], None] = lambda s: None) -> BenchResult:
    """Every variant at every batch size; the variants of one batch size are timed together
    (interleaved, with the matmul probe of each dtype in use), batch sizes one after another.
    `threads`: torch's intra-op threads while it runs (set back afterwards), 1 to the machine's
    logical CPUs (torch crashes when asked for tens of thousands)."""
    if threads is not None and not 1 <= threads <= (os.cpu_count() or 1):
        raise ValueError(f"threads must be 1 to {os.cpu_count() or 1} (this machine's logical CPUs), got {threads}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return bench_all(model, graph, flops_per_sample, variants, batches, torch.get_num_threads(), rounds,
                         device, samples, log)
    finally:
        torch.set_num_threads(before)


def bench_all(model: torch.nn.Module, graph: Graph, flops_per_sample: float, variants: list[Variant],
              batches: list[int], threads: int, rounds: int, device: str, samples: int,
              log: Callable[[str], None]) -> BenchResult:
    model.eval()
    rows: list[Row] = []
    prepared: dict[Variant, Prepared | str] = {}
    deviations: dict[Variant, tuple[str, dict] | None] = {}
    fp32_eager = None
    with tempfile.TemporaryDirectory(prefix="archspec-bench-") as work:
        for v in variants:
            log(f"prepare {v.label}")
            try:
                prepared[v] = prepare(v, model, graph, work, threads, device)
            except Unavailable as exc:
                prepared[v] = str(exc)
            except Exception as exc:  # noqa: BLE001 - only running out of memory becomes a row; the rest is raised
                prepared[v] = out_of_memory_row(exc, "while it was prepared (exported, compiled or loaded)")
        for v, p in prepared.items():
            if isinstance(p, str) or is_reference(v, device):
                deviations[v] = None
                continue
            if fp32_eager is None:
                fp32_eager = torch_runner(model, graph, "fp32", compiled=False, device="cpu")
            log(f"deviation of {v.label} from fp32 eager")
            dev_batch = min(batches)  # a size each variant runs anyway (torch.compile compiles per size)
            try:
                deviations[v] = deviation_of(v, p, fp32_eager, graph, dev_batch, samples)
            except Exception as exc:  # noqa: BLE001 - only running out of memory becomes a row; the rest is raised
                prepared[v] = out_of_memory_row(exc, f"at batch {dev_batch}")
                deviations[v] = None
        probe_rates: dict[str, list[float]] = {}
        for batch in batches:
            runners, work_of = {}, {}
            out_of_memory: dict[Variant, str] = {}
            for v, p in prepared.items():
                if isinstance(p, str):
                    continue
                log(f"warm up {v.label} at batch {batch}")
                try:
                    runners[v.label] = p.bind(batch)
                except Exception as exc:  # noqa: BLE001 - only running out of memory becomes a row; the rest is raised
                    out_of_memory[v] = out_of_memory_row(exc, f"at batch {batch}")
            dtypes = {probe_precision(v.precision) for v, p in prepared.items() if not isinstance(p, str)} or {"fp32"}
            for dtype in sorted(dtypes):
                probe, flops = matmul_probe(dtype=DTYPES[dtype], device=device)
                runners[f"probe {dtype}"] = probe
                work_of[f"probe {dtype}"] = flops
            log(f"time batch {batch}: {len(runners)} runners, {rounds} rounds")
            with torch.inference_mode():
                timings = interleaved(runners, rounds=rounds, work=work_of)
            for dtype in dtypes:
                probe_rates.setdefault(dtype, []).append(timings[f"probe {dtype}"].rate)
            for v, p in prepared.items():
                if isinstance(p, str) or v in out_of_memory:
                    rows.append(Row(v, batch, status=p if isinstance(p, str) else out_of_memory[v]))
                    continue
                dtype = probe_precision(v.precision)
                text, data = deviations.get(v) or (None, None)
                rows.append(Row(v, batch, timings[v.label], flops=flops_per_sample * batch,
                                probe_rate=timings[f"probe {dtype}"].rate, deviation=text, deviation_json=data))
    probes = {k: sum(v) / len(v) for k, v in probe_rates.items()}
    notes = [f"{v.label}: {p.note}" for v, p in prepared.items() if not isinstance(p, str) and p.note]
    return BenchResult(rows, threads, rounds, machine_description(), probes, notes)


def deviation_of(v: Variant, p: Prepared, fp32_eager: Prepared, graph: Graph, batch: int, samples: int
                 ) -> tuple[str, dict]:
    """(the table's text, report's record) of variant v's difference from fp32 eager at `batch`."""
    if v.precision == "fp32":
        args = example_inputs(graph, batch=batch)
        gap = max_abs_difference(p.outputs(args), fp32_eager.outputs(args))
        return f"max |diff| {gap:.1e}", {"max_abs": gap}
    dev = measure_deviation(fp32_eager.outputs, p.outputs, graph, v.precision, v.target, batch=batch,
                            samples=samples)
    text = f"max |diff| {dev.max_abs:.1e} (of {dev.scale:.1e})"
    if dev.top1_total:
        text += f", top-1 {dev.top1_agree}/{dev.top1_total}"
    return text, dev.to_json()


def out_of_memory_row(exc: BaseException, when: str) -> str:
    """A row's status for a variant that ran out of memory `when` (ONNX Runtime's, torch's or
    Python's allocation failure: memory.py); any other failure is raised as it is."""
    if not ran_out_of_memory(exc):
        raise exc
    first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
    return f"ran out of memory {when} ({first}); try a smaller --batch, input size or sequence length"
