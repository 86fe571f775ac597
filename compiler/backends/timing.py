"""Timing on a shared, noisy machine: several runners measured side by side in one process.

Every runner (a callable that runs one forward) is timed in interleaved rounds, the order
rotating from round to round, so that a slow spell of the machine (another process, a clock
change) falls on all of them alike; what counts is the median of the rounds, with the range
shown beside it. A matmul probe can run as one more runner: its rate, measured in the same
rounds, says what share of the machine's matmul speed a model reaches, which compares across
machines and moments better than milliseconds do.

Peak memory is the growth of the process's peak resident set (Linux: VmHWM, reset through
/proc/self/clear_refs) while a runner runs, for CPU runtimes (torch, ONNX Runtime); on CUDA
it is torch's own peak allocation.

ONNX Runtime sessions made here have intra-op spinning off: spinning idle threads otherwise
slow the next torch call in the same process by 1.5x (DESIGN.md section 8).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class Timing:
    """The per-call times (seconds) of one runner, one per round."""

    name: str
    times: list[float] = field(default_factory=list)
    work: float = 0.0  # what one call does, for a rate: samples (throughput) or FLOPs (probe)
    peak_bytes: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def low(self) -> float:
        return min(self.times)

    @property
    def high(self) -> float:
        return max(self.times)

    @property
    def rate(self) -> float:
        """work per second at the median time."""
        return self.work / self.median if self.times else float("nan")

    @property
    def spread(self) -> float:
        """(max - min) / median of the rounds: how noisy this runner's figures were."""
        return (self.high - self.low) / self.median if self.times else float("nan")

    def to_json(self) -> dict:
        return {"median_ms": self.median * 1e3, "min_ms": self.low * 1e3, "max_ms": self.high * 1e3,
                "rounds": len(self.times), "peak_mb": None if self.peak_bytes is None else self.peak_bytes / 2**20}


def call_time(fn: Callable[[], object], iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def interleaved(runners: dict[str, Callable[[], object]], rounds: int = 9, iters: int | None = None,
                warmup: int = 2, min_round_s: float = 0.2, work: dict[str, float] | None = None,
                memory: bool = True) -> dict[str, Timing]:
    """Time every runner in `rounds` interleaved rounds (the order rotating), after `warmup`
    calls each. A round calls each runner `iters` times (default: enough for `min_round_s`,
    from the warm-up's time). Returns {name: Timing} with per-call times.

    With `memory`, Timing.peak_bytes is the growth of the process's peak resident set over the
    warm-up calls, from just before the first: working memory (activations, ONNX Runtime's
    arena, caches a runtime fills on its first call such as prepacked weights), not the weights
    already held. A runner that compiles should compile before it is handed over."""
    names = list(runners)
    timings = {n: Timing(n, work=(work or {}).get(n, 0.0)) for n in names}
    counts = {}
    for name in names:
        fn = runners[name]
        peak = PeakMemory() if memory else None
        if peak is not None:
            peak.start()
        first = call_time(fn, 1)
        for _ in range(max(0, warmup - 1)):
            first = min(first, call_time(fn, 1))
        if peak is not None:
            timings[name].peak_bytes = peak.stop()
        counts[name] = iters or max(1, min(50, round(min_round_s / max(first, 1e-6))))
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            timings[name].times.append(call_time(runners[name], counts[name]))
    return timings


# -- the matmul probe -------------------------------------------------------------------------------


def synchronizer(device: str) -> Callable[[], None]:
    """What makes a timed call wait for the work it queued on `device`: nothing on a CPU."""
    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def matmul_probe(size: int = 2048, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """(runner, FLOPs per call) of one size^3 matmul: the machine's matmul rate, for comparison."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    sync = synchronizer(device)

    def run():
        torch.mm(a, b)
        sync()

    return run, 2.0 * size ** 3


def probe_rate(seconds: float = 0.5, dtype: torch.dtype = torch.float32) -> float:
    """The matmul probe's rate (FLOP/s) over about `seconds` now: what the machine gives this
    process at the moment (another process on the same cores shows as a lower rate)."""
    run, flops = matmul_probe(dtype=dtype)
    run()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        count += 1
    return flops * count / (time.perf_counter() - start)


def wait_for_quiet(min_rate: float, max_wait: float = 600.0, pause: float = 20.0,
                   log: Callable[[str], None] = lambda s: None) -> float:
    """Wait (up to `max_wait` seconds) until the probe's rate reaches `min_rate` FLOP/s: on a
    shared machine, time nothing while another process holds the cores. Returns the last rate."""
    deadline = time.monotonic() + max_wait
    while True:
        rate = probe_rate()
        if rate >= min_rate or time.monotonic() >= deadline:
            return rate
        log(f"machine busy: probe {rate / 1e9:.0f} GFLOP/s < {min_rate / 1e9:.0f}; waiting {pause:.0f} s")
        time.sleep(pause)


def reuse_freed_memory() -> bool:
    """glibc only: keep freed memory for reuse instead of returning it to the kernel (mallopt
    M_MMAP_THRESHOLD and M_TRIM_THRESHOLD to 1 GiB), so that eager PyTorch's large temporaries
    stop costing page faults on every call (ONNX Runtime has its own arena). Process-wide: it
    changes every runtime's allocations alike. Returns whether it took effect."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


# -- peak memory ---------------------------------------------------------------------------------


class PeakMemory:
    """The growth of the process's peak resident set between start() and stop(), in bytes
    (None where the platform cannot say: not Linux, or /proc/self/clear_refs not writable).
    With CUDA in use, torch's peak allocation is added."""

    def start(self) -> None:
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self.cuda_base = torch.cuda.memory_allocated()
        self.ok = _reset_peak_rss()
        self.base = _rss("VmRSS") if self.ok else None

    def stop(self) -> int | None:
        result = None
        if self.ok and self.base is not None:
            peak = _rss("VmHWM")
            result = max(0, peak - self.base) if peak is not None else None
        if self.cuda:
            torch.cuda.synchronize()
            result = (result or 0) + torch.cuda.max_memory_allocated() - self.cuda_base
        return result


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rss(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# -- ONNX Runtime -------------------------------------------------------------------------------------


def onnxruntime_session(path_or_bytes, threads: int | None = None, optimization: str = "all",
                        optimized_path: str | None = None):
    """An onnxruntime CPU session with intra-op spinning off (and inter-op off too), `threads`
    intra-op threads (default: torch's), graph optimisations `all`, `extended`, `basic` or
    `none`; `optimized_path` saves the graph ORT optimised."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    levels = {"all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
              "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "none": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL}
    options.graph_optimization_level = levels[optimization]
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(path_or_bytes, options, providers=["CPUExecutionProvider"])


def machine_description() -> str:
    """One line: CPU model, cores, the vector extensions that matter here (isa.py), torch and ORT versions."""
    from archspec.core.isa import read_isa

    isa = read_isa()
    try:
        import onnxruntime
        ort = f", onnxruntime {onnxruntime.__version__}"
    except ImportError:
        ort = ""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{isa.cpu}, {cpus} CPUs ({', '.join(isa.extensions) or 'no AVX2'}), torch {torch.__version__}{ort}"
