"""`archspec bench SPEC`: how fast the built model runs, on each target and precision asked
for, timed side by side in one process.

    archspec bench specs/swin_t.yaml --target eager onnx --batch 1 8 --threads 2
    archspec bench specs/vit_b16.yaml --target eager --precision fp32 bf16 --json
    archspec bench specs/vit_ti16.yaml --target eager compile aoti --threads 2
    archspec bench gpt2 --generate --prompt 8 --new-tokens 64 --precision fp32 bf16 --threads 2
    archspec bench llama --generate --target eager compile --precision bf16

Per target, precision and batch: the median and range of the per-call latency over
interleaved rounds (the order rotating, so that the machine's slow spells fall on all alike),
throughput, peak memory (growth of the resident set over the first calls), and the model's
FLOP rate as a percentage of the rate of a matmul probe of the row's own precision (fp32 or
bf16), measured in the same rounds. The first line names the CPU and its extensions (AVX-512,
AVX512-BF16, AMX: archspec/core/isa.py), in --json under "isa", so that figures from
different machines are read for what they are. Lower precisions
and exported targets also show their deviation from fp32 eager (max |difference|, and top-1
agreement on random inputs for classifiers). ONNX Runtime runs archspec's optimised graph
(`export_onnx(optimize=True)`) with intra-op spinning off. A target that cannot run here
(TensorRT without a CUDA GPU, bf16 ONNX on a CPU) is listed with the reason.

Every number it takes is bounded, each a usage error naming the option and its range before any
work: --threads up to this machine's logical CPUs (more only measures contention, and torch
crashes when asked for tens of thousands), --rounds and --samples up to MAX_ROUNDS and
MAX_SAMPLES, at most MAX_BATCHES batch sizes, each within the batch sizes the checker proves
shapes for (1 to 1024) and with activations that fit in the memory available (a model whose
weights do not fit is refused as by `build`).

With --generate, a decoder-only spec that generates (gpt2, llama) is timed decoding instead, at
batch 1 (compiler/backends/bench_generate.py), with --target eager (the default) and/or compile
(generate(compile=True): the decode step compiled once, its compile time reported): prefill
ms, decode ms per token at an early and a late position and over all steps, tokens/s, the
memory-bandwidth floor of a token (a batch-1 matrix-vector product over every weight matrix it
passes through, in the row's precision, timed in the same rounds) and the ratio to it, the
weights' and the KV cache's bytes, and the growth of the peak resident set. A spec that cannot
generate is an error saying why.
"""

from __future__ import annotations

import json
import os
import sys

from ...budget import check_build_memory
from ...compiler.backends import targets
from ...core.errors import UsageError
from ...core.types import BATCH
from ...pipeline import check_file
from .common import (add_spec_arguments, batch_fits_memory, checked_seed, counted, overrides_of, require_cuda,
                     spec_path)

NAME = "bench"
HELP = "time the built model on each target and precision (latency, throughput, memory, matmul share)"
MAX_ROUNDS = 1_000  # interleaved rounds (the default is 9; each runs every variant once per batch size)
MAX_SAMPLES = 10_000  # random inputs for the top-1 agreement (run in batches of the smallest --batch)
MAX_BATCHES = 16  # batch sizes timed one after another
DEFAULT_PROMPT, DEFAULT_NEW_TOKENS = 8, 64  # --generate
MIN_NEW_TOKENS = 11  # bench_generate.MIN_NEW_TOKENS: an early and a late window of steps that do not overlap
MAX_TOKENS = 1_000_000  # --prompt, --new-tokens: beyond any shipped spec's context; the spec's own bounds it first
GENERATE_PRECISIONS = ("fp32", "bf16")  # bench_generate.GENERATE_PRECISIONS
GENERATE_TARGETS = ("eager", "compile")  # bench_generate.GENERATE_TARGETS

def add_arguments(parser) -> None:
    add_spec_arguments(parser)
    default = targets.default("bench")
    names = ", ".join(t.name for t in targets.builtins("bench"))
    parser.add_argument("--target", nargs="+", default=[default], choices=targets.TargetChoices("bench"),
                        metavar="TARGET",
                        help=f"one or more of {names} (default {default}; `archspec targets` says what each is); "
                             "several are timed in the same interleaved rounds")
    parser.add_argument("--batch", nargs="+", type=int, default=[1], metavar="N",
                        help=f"batch sizes (default 1; at most {MAX_BATCHES} of them, each 1 to {BATCH.hi:,} and "
                             "fitting in memory)")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=targets.PrecisionChoices("bench"),
                        metavar="P",
                        help="fp32 (default), bf16, fp16 (CUDA), int8 (ONNX Runtime); each with each target")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads for torch and ONNX Runtime "
                                                                  "(default: torch's; at most the logical CPUs)")
    parser.add_argument("--rounds", type=int, default=9,
                        help=f"interleaved timing rounds (default 9, at most {MAX_ROUNDS:,})")
    parser.add_argument("--samples", type=int, default=32,
                        help="random inputs for the top-1 agreement of lower precisions "
                             f"(default 32, at most {MAX_SAMPLES:,})")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="eager/compile device")
    parser.add_argument("--reuse-memory", action="store_true",
                        help="glibc: keep freed memory for reuse, so that eager's large temporaries cost no page "
                             "faults (process-wide: applies to every target alike)")
    parser.add_argument("--weights", metavar="FILE", help="load weights first (as for build)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights (default 0)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--generate", action="store_true",
                        help="time greedy decoding at batch 1 instead (a spec that generates: gpt2, llama): prefill, "
                             "ms per token, tokens/s, the memory-bandwidth floor; --precision fp32 and/or bf16")
    parser.add_argument("--prompt", type=int, default=None, metavar="N",
                        help=f"--generate: prompt tokens (default {DEFAULT_PROMPT})")
    parser.add_argument("--new-tokens", type=int, default=None, metavar="N",
                        help=f"--generate: tokens to decode (default {DEFAULT_NEW_TOKENS}, at least "
                             f"{MIN_NEW_TOKENS}; prompt + new tokens within the spec's longest sequence)")


def check_numbers(args) -> None:
    """Usage errors in the numeric options, before any work."""
    for batch in args.batch:
        counted(batch, "--batch", 1, BATCH.hi, " (the batch sizes the checker proves shapes for)")
    if len(set(args.batch)) > MAX_BATCHES:
        raise UsageError(f"--batch takes 1 to {MAX_BATCHES} sizes, got {len(set(args.batch))}")
    if args.threads is not None:
        counted(args.threads, "--threads", 1, os.cpu_count() or 1, " (this machine's logical CPUs)")
    counted(args.rounds, "--rounds", 1, MAX_ROUNDS)
    counted(args.samples, "--samples", 0, MAX_SAMPLES)
    checked_seed(args.seed)


def check_generate_options(args) -> None:
    """Usage errors in the options of --generate (and --prompt/--new-tokens without it)."""
    if not args.generate:
        if args.prompt is not None or args.new_tokens is not None:
            raise UsageError("--prompt and --new-tokens are for --generate (time decoding)")
        return
    other = [t for t in args.target if t not in GENERATE_TARGETS]
    if other:
        raise UsageError(f"--generate times generate() with --target eager and/or compile, got {', '.join(other)}")
    if args.batch != [1]:
        raise UsageError("--generate times batch 1 (decoding one token at batch 1 is what the floor measures); "
                         "leave out --batch")
    if args.device != "cpu":
        raise UsageError("--generate times decoding on the CPU; leave out --device")
    other = [p for p in args.precision if p not in GENERATE_PRECISIONS]
    if other:
        raise UsageError(f"--generate takes --precision {' and/or '.join(GENERATE_PRECISIONS)}, got {', '.join(other)}")
    args.prompt = counted(DEFAULT_PROMPT if args.prompt is None else args.prompt, "--prompt", 1, MAX_TOKENS)
    args.new_tokens = counted(DEFAULT_NEW_TOKENS if args.new_tokens is None else args.new_tokens, "--new-tokens",
                              MIN_NEW_TOKENS, MAX_TOKENS,
                              " (an early and a late window of decode steps, 5 each, that do not overlap)")


def run(args) -> int:
    check_numbers(args)
    check_generate_options(args)
    if args.generate:
        return run_generate(args)
    report = check_file(spec_path(args), overrides_of(args))
    check_build_memory(report, runs_model=False)  # the weights, located at the node that needs the most
    batch_fits_memory(report, max(args.batch))
    import torch

    from ...compiler.backends.bench import Variant, run_bench
    from ...compiler.lower import lower

    if args.device == "cuda":
        require_cuda()
    log = (lambda s: None) if args.json else (lambda s: print(f"... {s}", file=sys.stderr, flush=True))
    if args.reuse_memory:
        from ...compiler.backends.timing import reuse_freed_memory

        if not reuse_freed_memory():
            log("--reuse-memory: not glibc (or mallopt failed); the default allocator stays")
    model = lower(report.graph, seed=args.seed)
    if args.weights:
        from ...compiler.weights.load import load_weights

        load_weights(model, args.weights, report.graph)
    model.eval()
    variants = [Variant(t, p) for t in dict.fromkeys(args.target) for p in dict.fromkeys(args.precision)]
    result = run_bench(model, report.graph, report.flops, variants, sorted(set(args.batch)), threads=args.threads,
                       rounds=args.rounds, device=args.device, samples=args.samples, log=log)
    if args.json:
        print(json.dumps({"spec": report.name, "flops_per_sample": report.flops, **result.to_json()}, indent=2))
    else:
        print(result.table(title=f"{report.name}: {report.flops / 1e9:.2f} GFLOPs per sample"))
    return 0


def run_generate(args) -> int:
    """bench --generate: the decoding figures of compiler/backends/bench_generate.py."""
    from ...primitives.kv_cache import generates

    report = check_file(spec_path(args), overrides_of(args))
    check_build_memory(report, runs_model=False)
    if not generates(report.graph) or len(report.graph.inputs()) != 1:
        raise cannot_generate(report)
    import torch

    from ...compiler.backends.bench_generate import bench_generate
    from ...compiler.generate import decoder_of
    from ...compiler.generate.driver import check_request
    from ...compiler.lower import lower

    model = lower(report.graph, seed=args.seed)
    if args.weights:
        from ...compiler.weights.load import load_weights

        load_weights(model, args.weights, report.graph)
    model.eval()
    decoder = decoder_of(model)
    try:
        check_request(decoder, torch.zeros(1, args.prompt, dtype=torch.long), None, args.new_tokens)
    except ValueError as exc:
        raise UsageError(f"--prompt {args.prompt} --new-tokens {args.new_tokens}: {exc}") from None
    log = (lambda s: None) if args.json else (lambda s: print(f"... {s}", file=sys.stderr, flush=True))
    result = bench_generate(model, list(dict.fromkeys(args.precision)), prompt=args.prompt,
                            new_tokens=args.new_tokens, rounds=args.rounds, threads=args.threads, seed=args.seed,
                            log=log, targets=tuple(dict.fromkeys(args.target)))
    if args.json:
        print(json.dumps({"spec": report.name, "generate": True, **result.to_json()}, indent=2))
    else:
        print(result.table(title=f"{report.name}: decoding {args.new_tokens} tokens after a {args.prompt}-token "
                                 "prompt"))
    return 0


def cannot_generate(report):
    """The error for --generate on a spec that generate() cannot decode (or an encoder-decoder)."""
    from ...compiler.generate.driver import CAN_GENERATE
    from ...core.errors import error

    from ...primitives.kv_cache import fed_inputs, without_cache

    graph = report.graph
    if len(fed_inputs(graph)) > 1:
        ids = fed_inputs(graph)[0].type.layout == "ids"
        return error(f"bench --generate times decoder-only specs; {report.name} is an encoder-decoder",
                     hint=("`archspec generate` decodes it" if ids else "model.generate decodes it in Python (the "
                           "command line feeds token ids, and its source is not)")
                     + "; time a decoder-only spec such as gpt2 or llama")
    uncached = without_cache(graph)
    if uncached is not None:
        return error(f"bench --generate times decoding through a cache, and {report.name} decodes without one "
                     f"({uncached}): each new token runs the whole sequence again",
                     hint="`archspec generate` and model.generate decode it all the same; for a cache, see "
                          "docs/generate.md on what keeps one")
    return error(f"{report.name} cannot generate, so bench --generate has nothing to time",
                 hint=CAN_GENERATE)
