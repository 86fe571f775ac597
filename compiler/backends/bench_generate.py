"""What `archspec bench SPEC --generate` measures (and tests/benchmarks/bench_generate.py
shares): the speed of generate() (compiler/generate/) at batch 1, against the memory-bandwidth
floor of one decoded token, measured in the same interleaved rounds.

    result = bench_generate(model, ["fp32", "bf16"], prompt=8, new_tokens=64, rounds=5,
                            targets=["eager", "compile"])
    print(result.table())

Each precision is timed on each target: `eager` is generate() as it runs by default, `compile`
is generate(compile=True), its decode steps one AOTInductor program made frozen (the time that
takes, in the untimed first call, is reported as compile_s).

After an untimed generate() per precision and target, as long as the timed ones (first calls
set up kernels), per precision, target and round: one greedy generate() of `new_tokens` after a random prompt of
`prompt` tokens, each step's time taken between the streamer's put() calls (the first step is
the prefill, with the first choice), and the floor: one batch-1 matrix-vector product over every
weight matrix a token passes through (each Linear, the lm head; an embedding table is a row
read and is left out, unless it is also the tied head), in the row's precision, the fastest of
F.linear on the weights as they are, oneDNN on the weights packed for it and, on the compile
target, the products compiled as its step compiles them (Floor).
Decoding one token at batch 1 is memory-bound: it cannot beat streaming its weights once, which
is the floor.

Reported (medians over the rounds): prefill ms; decode ms per token at an early and a late
position (the median of the SPAN steps each side); decode ms per token over all steps and
tokens/s (= 1000 / that); the floor in ms and our ratio to it; late / early (decoding should
cost time linear in the tokens, so near 1). Memory, each named for what it is: the weights'
bytes, the KV cache's bytes (preallocated for prompt + new tokens), and the growth of the
process's peak resident set over the first generate() of the row (timing.PeakMemory resets the
high-water mark first; None where Linux's /proc/self/clear_refs is missing).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

from archspec.core.isa import Isa, read_isa
from ..inductor.matvec import floor_pass, packed_floor_pass, tuned_floor_pass, weight_matrices
from .precision import cast_model
from .timing import PeakMemory, machine_description

GENERATE_PRECISIONS = ("fp32", "bf16")  # what bench --generate times (fp16 decoding on a CPU is not a target)
GENERATE_TARGETS = ("eager", "compile")  # generate() as it is, and generate(compile=True)
SPAN = 2  # decode steps each side of a position whose median is its time
MIN_NEW_TOKENS = 4 * SPAN + 3  # an early and a late window that do not overlap
FLOOR_PASSES = 9  # matvec passes per round; their median is the round's floor


class StepTimes:
    """A streamer (put, end) recording the time of each put(): the prompt, then each new token."""

    def __init__(self):
        self.stamps: list[float] = []

    def put(self, tokens) -> None:
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass

    def steps(self) -> list[float]:
        """Seconds per produced token: [prefill (with the first choice), decode step 1, ...]."""
        return [b - a for a, b in zip(self.stamps, self.stamps[1:])]


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class Floor:
    """The floor of one token: the fastest way to multiply every matrix by a vector once, of
    F.linear on the weights as they are, oneDNN on the weights packed for it (on an AMD EPYC the
    packed pass streamed 34-61 GiB/s, F.linear 16-25) and, with `tuned` (where the compiled decode
    step is timed: it may take them), one program of them compiled as that step compiles its
    linears (inductor's own C++ GEMM kernels where faster than oneDNN's: matvec.tuned_floor_pass,
    compiled here once)."""

    def __init__(self, weights: list[torch.Tensor], tuned: bool = False):
        makers = (floor_pass, packed_floor_pass) + ((tuned_floor_pass,) if tuned else ())
        if weights and weights[0].is_cuda:  # a GPU: the weights' bytes over its measured copy bandwidth
            makers = (copy_floor_pass,)
        self.passes = [once for once in (make(weights) for make in makers) if once is not None]

    def seconds(self, passes: int = FLOOR_PASSES) -> float:
        """The fastest way's median of `passes` passes, each way after a warm-up pass."""
        medians = []
        for once in self.passes:
            once()
            medians.append(statistics.median(once() for _ in range(passes)))
        return min(medians)


def copy_floor_pass(weights: list[torch.Tensor]) -> Callable[[], float]:
    """On a CUDA GPU: the time to read the weights' bytes once, at the bandwidth of one copy of
    as many bytes from one buffer of the GPU's memory to another (which reads and writes each
    byte once: half its time), timed with CUDA events."""
    size = tensor_bytes(weights)
    device = weights[0].device
    source = torch.empty(size, dtype=torch.uint8, device=device)  # [bytes]
    target = torch.empty_like(source)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once() -> float:
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / 2

    return once


def kv_cache_bytes(model: nn.Module, batch: int, length: int, dtype: torch.dtype) -> int:
    """The bytes of the KV cache generate() allocates for `length` tokens (keys and values of
    each cached attention layer, a sliding window's ring holding only its window)."""
    from ..generate import decoder_of

    size = torch.empty((), dtype=dtype).element_size()
    total = 0
    decoder = decoder_of(model)
    for m, window in zip(decoder.attention, decoder.windows):
        slots = min(length, window) if window else length
        heads, key, value = m.cache_entry()  # what the layer caches per token (a latent layer: its latent)
        total += batch * heads * slots * (key + value) * size
    return total


def decode_steps(model: nn.Module, ids: torch.Tensor, new_tokens: int, compile: bool = False
                 ) -> tuple[torch.Tensor, list[float]]:
    """(the generated ids, seconds per step) of one greedy generate()."""
    from ..generate import generate

    streamer = StepTimes()
    out = generate(model, ids, max_new_tokens=new_tokens, streamer=streamer, compile=compile)
    return out, streamer.steps()


def around(steps: list[float], prompt: int, position: int, span: int = SPAN) -> float:
    """Median decode-step time around the step that feeds the token at `position` (steps[0] is
    the prefill; steps[k] feeds position prompt + k - 1, counting from 0, i.e. index = position - prompt)."""
    index = position - prompt
    window = steps[max(1, index - span): index + span + 1]
    return statistics.median(window)


def positions(prompt: int, new_tokens: int) -> tuple[int, int]:
    """(early, late): the positions whose windows are the first and the last SPAN-wide ones."""
    return prompt + 1 + SPAN, prompt + new_tokens - 1 - SPAN


@dataclass
class GenerateRow:
    """One precision's figures on one target, seconds (medians over the rounds) and bytes."""
    precision: str
    target: str
    prompt: int
    new_tokens: int
    prefill: float
    early: float  # per token, around the early position
    late: float
    per_token: float  # mean over all decode steps
    floor: float
    weights_bytes: int
    cache_bytes: int
    peak_growth: int | None
    compile_seconds: float | None = None  # the compile target's first (untimed) generate()
    compile_how: str | None = None  # its step "made" then, or "loaded" (kept on disk by an earlier run)

    @property
    def label(self) -> str:
        return self.precision if self.target == "eager" else f"{self.precision} {self.target}"

    @property
    def positions(self) -> tuple[int, int]:
        return positions(self.prompt, self.new_tokens)

    @property
    def tokens_per_s(self) -> float:
        return 1000 / (self.per_token * 1e3)

    @property
    def floor_ratio(self) -> float:
        return self.per_token / self.floor

    @property
    def late_over_early(self) -> float:
        return self.late / self.early

    def to_json(self) -> dict:
        early, late = self.positions
        return {"precision": self.precision, "target": self.target, "compile_s": self.compile_seconds,
                "compile_how": self.compile_how,
                "prompt": self.prompt, "new_tokens": self.new_tokens,
                "prefill_ms": self.prefill * 1e3, "early_position": early, "late_position": late,
                "ms_per_token_early": self.early * 1e3, "ms_per_token_late": self.late * 1e3,
                "late_over_early": self.late_over_early, "ms_per_token": self.per_token * 1e3,
                "tokens_per_s": self.tokens_per_s, "floor_ms_per_token": self.floor * 1e3,
                "floor_ratio": self.floor_ratio, "weights_bytes": self.weights_bytes,
                "kv_cache_bytes": self.cache_bytes, "peak_rss_growth_bytes": self.peak_growth}


@dataclass
class GenerateBench:
    rows: list[GenerateRow]
    threads: int
    rounds: int
    machine: str
    isa: Isa = field(default_factory=read_isa)

    def table(self, title: str | None = None) -> str:
        lines = [f"CPU: {self.isa.line()}", *([title] if title else []),
                 f"{self.machine}; {self.threads} threads, {self.rounds} interleaved rounds, batch 1, greedy, "
                 "medians over the rounds"]
        if self.rows:
            early, late = self.rows[0].positions
            width = max(len(r.label) for r in self.rows)
            lines.append(f"{'prec':{width}} {'prefill ms':>10} {f'ms/tok @{early}':>11} {f'ms/tok @{late}':>11} "
                         f"{'ms/tok':>8} {'tokens/s':>9} {'floor ms':>9} {'/floor':>7} {'weights MB':>10} "
                         f"{'KV cache MB':>11} {'peak RSS +MB':>12}")
        for r in self.rows:
            peak = "-" if r.peak_growth is None else f"{r.peak_growth / 2**20:.1f}"
            lines.append(f"{r.label:{width}} {r.prefill * 1e3:10.2f} {r.early * 1e3:11.2f} {r.late * 1e3:11.2f} "
                         f"{r.per_token * 1e3:8.2f} {r.tokens_per_s:9.1f} {r.floor * 1e3:9.2f} "
                         f"{r.floor_ratio:6.2f}x {r.weights_bytes / 2**20:10.1f} {r.cache_bytes / 2**20:11.2f} "
                         f"{peak:>12}")
        lines += ["floor: one batch-1 matrix-vector product over every weight matrix a token passes through, in the "
                  "row's precision, the fastest of F.linear, oneDNN on weights packed for it and (compile rows) the "
                  "products compiled as the compiled step compiles them, timed in the same "
                  "rounds; /floor = ms/tok over it",
                  "ms/tok: mean over all decode steps; tokens/s = 1000 / ms/tok; @N: median of the steps around "
                  "position N; peak RSS +MB: growth of the peak resident set over the row's first generate()"]
        made = [f"{r.label} {r.compile_seconds:.1f} s, {r.compile_how}" for r in self.rows
                if r.compile_seconds is not None]
        if made:
            lines.append("compile: generate(compile=True), the decode step made once before the rounds, or loaded "
                         "where an earlier run kept it (" + ", ".join(made) + ")")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"isa": self.isa.to_json(), "machine": self.machine, "threads": self.threads, "rounds": self.rounds,
                "batch": 1, "rows": [r.to_json() for r in self.rows]}


@dataclass
class DecodePath:
    """One precision on one target made ready: its model, its weight matrices, and what its rounds recorded."""
    precision: str
    target: str
    model: nn.Module
    weights: list[torch.Tensor]
    floor: Floor
    compile_seconds: float | None = None
    compile_how: str | None = None
    runs: list[list[float]] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)
    peak: int | None = None


def prepare(model: nn.Module, precision: str, target: str, casts: dict) -> DecodePath:
    """The path of one precision and target (targets of one precision share its cast model, in `casts`)."""
    if precision not in casts:
        casts[precision] = model if precision == "fp32" else cast_model(model, precision).eval()
    low = casts[precision]
    weights = weight_matrices(low)
    return DecodePath(precision, target, low, weights, Floor(weights, tuned=target == "compile"))


def warm_up(path: DecodePath, ids: torch.Tensor, new_tokens: int) -> None:
    """The first generate() of a path, as long as the timed ones, untimed (kernels set up; the
    compile target's step made for the rounds' cache length, its time kept)."""
    start = time.perf_counter()
    decode_steps(path.model, ids, new_tokens, compile=path.target == "compile")
    if path.target == "compile":
        from ..generate import decoder_of

        path.compile_seconds = time.perf_counter() - start
        path.compile_how = ", ".join(sorted(set(decoder_of(path.model).compiled.how.values())))


def run_round(paths: list[DecodePath], ids: torch.Tensor, new_tokens: int, first: bool) -> None:
    """Every path once, in the given order: its generate(), then its floor."""
    for path in paths:
        peak = PeakMemory()
        if first:
            peak.start()
        _, steps = decode_steps(path.model, ids, new_tokens, compile=path.target == "compile")
        if first:
            path.peak = peak.stop()
        path.runs.append(steps)
        path.floors.append(path.floor.seconds())


def cache_length(path: DecodePath, tokens: int) -> int:
    """The slots generate() allocates on the path's target (compile rounds them up: driver.compiled_capacity)."""
    from ..generate import decoder_of
    from ..generate.driver import compiled_capacity

    return compiled_capacity(tokens, decoder_of(path.model).max_length) if path.target == "compile" else tokens


def summarise(path: DecodePath, prompt: int, new_tokens: int) -> GenerateRow:
    early, late = positions(prompt, new_tokens)
    runs = path.runs
    median = statistics.median
    return GenerateRow(
        path.precision, path.target, prompt, new_tokens, prefill=median(s[0] for s in runs),
        early=median(around(s, prompt, early) for s in runs), late=median(around(s, prompt, late) for s in runs),
        per_token=median(statistics.mean(s[1:]) for s in runs), floor=median(path.floors),
        weights_bytes=tensor_bytes(path.model.parameters()),
        cache_bytes=kv_cache_bytes(path.model, 1, cache_length(path, prompt + new_tokens),
                                   next(path.model.parameters()).dtype),
        peak_growth=path.peak, compile_seconds=path.compile_seconds, compile_how=path.compile_how)


def bench_generate(model: nn.Module, precisions: list[str], prompt: int = 8, new_tokens: int = 64, rounds: int = 5,
                   threads: int | None = None, seed: int = 0, log: Callable[[str], None] = lambda s: None,
                   targets: tuple[str, ...] = ("eager",)) -> GenerateBench:
    """Batch-1 greedy decoding of `new_tokens` after a random prompt of `prompt` tokens, per
    precision, with its floor, over `rounds` interleaved rounds (the order rotating). `model`:
    a built spec that generates (decoder-only), fp32. `targets`: eager and/or compile
    (GENERATE_TARGETS). `threads`: torch's intra-op threads while it runs (set back afterwards)."""
    if new_tokens < MIN_NEW_TOKENS:
        raise ValueError(f"new_tokens must be at least {MIN_NEW_TOKENS}, got {new_tokens}")
    unknown = [p for p in precisions if p not in GENERATE_PRECISIONS]
    if unknown:
        raise ValueError(f"precisions are {', '.join(GENERATE_PRECISIONS)}, got {', '.join(unknown)}")
    unknown = [t for t in targets if t not in GENERATE_TARGETS]
    if unknown:
        raise ValueError(f"targets are {', '.join(GENERATE_TARGETS)}, got {', '.join(unknown)}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        model.eval()
        casts: dict = {}
        paths = [prepare(model, p, t, casts) for p in dict.fromkeys(precisions) for t in dict.fromkeys(targets)]
        vocab = decoder_vocab(model)
        ids = torch.randint(0, vocab, (1, prompt), generator=torch.Generator().manual_seed(seed))
        for path in paths:  # first calls set up kernels for the prefill's and a step's shapes: not timed
            log(f"warming up {path.precision} {path.target}" + (" (compiling the decode step)"
                                                                 if path.target == "compile" else ""))
            warm_up(path, ids, new_tokens)
        for r in range(rounds):
            log(f"round {r + 1} of {rounds}")
            k = r % len(paths)
            run_round(paths[k:] + paths[:k], ids, new_tokens, first=r == 0)
        rows = [summarise(p, prompt, new_tokens) for p in paths]
        return GenerateBench(rows, torch.get_num_threads(), rounds, machine_description())
    finally:
        torch.set_num_threads(before)


def decoder_vocab(model: nn.Module) -> int:
    from ..generate import decoder_of

    return decoder_of(model).vocab
