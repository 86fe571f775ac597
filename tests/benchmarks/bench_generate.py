"""Decoding speed of archspec's generate() (compiler/generate/) against Hugging Face's generate
on the same weights and against the memory-bandwidth floor, in one process, interleaved.

For each model (GPT-2 small and the shipped Llama, at their shipped sizes, batch 1) and each
precision (fp32, bf16): a prompt of --prompt tokens, then greedy decoding to position --upto.
Per round, every path of every precision once, the order rotating:

  archspec     generate(model, ids, ...) with its preallocated key/value cache
  archspec compile
               generate(model, ids, ..., compile=True): the decode step one AOTInductor program,
               compiled frozen in a warm-up run before the rounds (compiler/generate/compiled.py)
  floor        one batch-1 matrix-vector product over every matrix a token passes through (each
               Linear, the lm head; the embedding is a row read, left out), in the row's
               precision, the fastest of F.linear, oneDNN on weights packed for one row and the
               products compiled as the compiled step compiles its linears (inductor's C++ GEMM
               kernels where faster): what a decode step costs if it only streamed its weights once
               (compiler/backends/bench_generate.py, as `archspec bench --generate`)
  hf eager     transformers' model.generate(ids, ...) (its default attention and cache)
  hf static+compile
               model.generate(..., cache_implementation="static") with model.forward under
               torch.compile(fullgraph=True) (on a GPU mode="reduce-overhead"), as Hugging Face
               documents; compiled in a warm-up run before the rounds. When it fails on this
               torch/transformers, the table says why.

Each step's time is taken between the streamer's put() calls (the first is the prefill).
Reported per row (medians over the rounds): prefill ms, decode ms per token at positions 16 and
--upto (the median of the 5 steps around each) and their ratio (linear decoding: near 1),
decode ms per token over all steps and tokens/s (1000 / that), ms per token at 16 over the floor
and the mean over the floor, ours over this row (same precision; ours is archspec compile, the
faster of our two, or archspec where compile did not run), and the growth of the
peak resident set over each path's first timed run (the high-water mark reset before it through
/proc/self/clear_refs, so it is the run's own growth, not the process's old peak).

    python tests/benchmarks/bench_generate.py --threads 2 [--models gpt2 llama llama-1b] [--precisions fp32 bf16]
        [--rounds 3] [--device cpu|cuda] [--json results.json]

On a CUDA GPU (--device cuda) "archspec compile" is the step under CUDA graphs
(compiler/generate/graphed.py), Hugging Face's static cache is compiled with
mode="reduce-overhead" (CUDA graphs, as its docs do it), and the floor is the weights' bytes
over the GPU's measured copy bandwidth (bench_generate.copy_floor_pass). llama-1b is the
shipped llama spec at TinyLlama-1.1B's shape (LLAMA_1B), random weights.

(not under `nice` on a busy machine: it then gets a few per cent of a core). It also says
whether ours and Hugging Face's eager chose the same tokens (greedy; in bf16 they may part).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from archspec.compiler.backends.bench_generate import (  # noqa: E402
    Floor, StepTimes, around, decode_steps, weight_matrices)
from archspec.compiler.backends.precision import DTYPES, cast_model  # noqa: E402
from archspec.compiler.backends.timing import PeakMemory  # noqa: E402

PATHS = ("archspec", "archspec compile", "floor", "hf eager", "hf static+compile")


# A Llama of about 1B parameters (TinyLlama-1.1B's shape: 1,100,048,384 parameters), random
# weights, as archspec's llama spec with these params; the shipped llama's own are the spec's.
LLAMA_1B = {"dim": 2048, "hidden": 5632, "layers": 22, "heads": 32, "kv_heads": 4}
SIZES = {"gpt2": {}, "llama": {}, "llama-1b": LLAMA_1B}


def reference(spec: str):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    if spec == "gpt2":
        return GPT2LMHeadModel._from_config(GPT2Config())
    size = {"dim": 512, "hidden": 1376, "layers": 4, "heads": 8, "kv_heads": 2, **SIZES[spec]}
    config = LlamaConfig(hidden_size=size["dim"], intermediate_size=size["hidden"], num_hidden_layers=size["layers"],
                         num_attention_heads=size["heads"], num_key_value_heads=size["kv_heads"], vocab_size=32000,
                         max_position_embeddings=2048, rope_theta=10000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=False)
    return LlamaForCausalLM._from_config(config)


def pair(spec: str, device: str = "cpu"):
    """(Hugging Face's model, ours) in fp32 with the same (randomly perturbed) weights, on `device`."""
    import archspec
    from archspec.compiler.weights.load import load_weights

    torch.manual_seed(0)
    ref = reference(spec).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    ref.generation_config.eos_token_id = None  # no early stop: both decode every token asked for
    ours = archspec.build(str(ROOT / "specs" / f"{spec.split('-')[0]}.yaml"), SIZES[spec]).eval()
    load_weights(ours, ref.state_dict())
    return ref.to(device), ours.to(device)


def hf_generate(ref, ids, new, **options):
    streamer = StepTimes()
    with torch.no_grad():
        out = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                           do_sample=False, pad_token_id=0, streamer=streamer, **options)
    return out, streamer.steps()


def static_compiled(ref, ids, new):
    """A runner of Hugging Face's static cache with the forward compiled (warmed up here, which
    compiles it), or the reason it cannot run, in one line."""
    model = copy.deepcopy(ref)
    mode = "reduce-overhead" if ids.is_cuda else None  # on a GPU as Hugging Face documents it: CUDA graphs
    try:
        model.forward = torch.compile(model.forward, mode=mode, fullgraph=True)
        hf_generate(model, ids, new, cache_implementation="static")
    except Exception as exc:  # noqa: BLE001 -- whatever torch.compile or transformers raise, reported
        return f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return lambda: hf_generate(model, ids, new, cache_implementation="static")


def runners_of(spec: str, precisions: list[str], ids, new, log) -> tuple[dict, dict, dict]:
    """({(precision, path): runner}, {(precision, path): why it cannot run}, {precision: weights MiB})."""
    ref32, ours32 = pair(spec, ids.device.type)
    runners, failed, sizes = {}, {}, {}
    for precision in precisions:
        ours = ours32 if precision == "fp32" else cast_model(ours32, precision)
        ref = ref32 if precision == "fp32" else copy.deepcopy(ref32).to(DTYPES[precision]).eval()
        weights = weight_matrices(ours)
        sizes[precision] = sum(w.numel() * w.element_size() for w in weights) / 2 ** 20
        runners[(precision, "archspec")] = lambda ours=ours: decode_steps(ours, ids, new)
        log(f"{spec} {precision}: compiling archspec's decode step (warm-up run)")
        decode_steps(ours, ids, new, compile=True)
        runners[(precision, "archspec compile")] = lambda ours=ours: decode_steps(ours, ids, new, compile=True)
        floor = Floor(weights, tuned=True)  # its compiled pass made here, once
        runners[(precision, "floor")] = lambda floor=floor: (None, [floor.seconds()])
        runners[(precision, "hf eager")] = lambda ref=ref: hf_generate(ref, ids, new)
        log(f"{spec} {precision}: compiling Hugging Face's static-cache forward (warm-up run)")
        static = static_compiled(ref, ids, new)
        if isinstance(static, str):
            failed[(precision, "hf static+compile")] = static
        else:
            runners[(precision, "hf static+compile")] = static
    return runners, failed, sizes


def bench(spec: str, precisions: list[str], prompt: int, upto: int, rounds: int, log, device: str = "cpu") -> dict:
    """The figures of one model (see the module docstring); the late position is `upto`."""
    ids = torch.randint(0, 1000, (1, prompt), generator=torch.Generator().manual_seed(1)).to(device)
    new = upto - prompt + 3
    runners, failed, sizes = runners_of(spec, precisions, ids, new, log)
    samples = {key: [] for key in runners}
    peaks, outs_same, compiled_same = {}, {p: True for p in precisions}, {p: True for p in precisions}
    keys = list(runners)
    for r in range(rounds):
        log(f"{spec}: round {r + 1} of {rounds}")
        k = r % len(keys)
        outs = {}
        for key in keys[k:] + keys[:k]:
            peak = PeakMemory()
            peak.start()
            outs[key], steps = runners[key]()
            if r == 0:
                peaks[key] = peak.stop()
            samples[key].append(steps)
        for p in precisions:
            outs_same[p] = outs_same[p] and torch.equal(outs[(p, "archspec")], outs[(p, "hf eager")])
            compiled_same[p] = compiled_same[p] and torch.equal(outs[(p, "archspec")], outs[(p, "archspec compile")])
    result = {"spec": spec, "prompt": prompt, "new_tokens": new, "upto": upto, "rounds": rounds, "rows": []}
    for p in precisions:
        floor = statistics.median(s[0] for s in samples[(p, "floor")])
        ours = figures(samples[(p, "archspec compile")], prompt, upto, floor, peaks[(p, "archspec compile")])
        for path in PATHS:
            row = {"precision": p, "path": path, "matrices_mib": round(sizes[p], 1)}
            if (p, path) in failed:
                row["status"] = failed[(p, path)]
            elif path == "floor":
                row.update(status="ok", ms_per_token=round(floor * 1e3, 3), tokens_per_s=round(1 / floor, 1),
                           best_ms=round(min(s[0] for s in samples[(p, "floor")]) * 1e3, 3))
            else:
                row.update(status="ok", **figures(samples[(p, path)], prompt, upto, floor, peaks[(p, path)]))
                row["ours_over_this"] = round(ours["ms_per_token"] / row["ms_per_token"], 3)
                if path == "hf eager":
                    row["same_tokens_as_ours"] = outs_same[p]
                if path == "archspec compile":
                    row["same_tokens_as_eager"] = compiled_same[p]
            result["rows"].append(row)
    return result


def figures(runs: list[list[float]], prompt: int, upto: int, floor: float, peak: int | None) -> dict:
    """One path's figures over the rounds (medians)."""
    early = statistics.median(around(s, prompt, 16) for s in runs)
    late = statistics.median(around(s, prompt, upto) for s in runs)
    per_token = statistics.median(statistics.mean(s[1:]) for s in runs)
    return {"prefill_ms": round(statistics.median(s[0] for s in runs) * 1e3, 2),
            "ms_at_16": round(early * 1e3, 2), "ms_at_upto": round(late * 1e3, 2),
            "upto_over_16": round(late / early, 3), "ms_per_token": round(per_token * 1e3, 2),
            "tokens_per_s": round(1 / per_token, 1), "at_16_over_floor": round(early / floor, 3),
            "mean_over_floor": round(per_token / floor, 3),
            "peak_rss_growth_mib": None if peak is None else round(peak / 2 ** 20, 1)}


def table(result: dict) -> str:
    upto = result["upto"]
    lines = [f"{result['spec']}: batch 1, prompt {result['prompt']}, {result['new_tokens']} new tokens, "
             f"{result['rounds']} interleaved rounds, medians",
             f"{'prec':5} {'path':18} {'prefill ms':>10} {'ms@16':>7} {f'ms@{upto}':>7} {f'{upto}/16':>6} "
             f"{'ms/tok':>7} {'tok/s':>7} {'@16/floor':>9} {'mean/floor':>10} {'ours/this':>9} {'RSS +MiB':>8}"]
    for row in result["rows"]:
        head = f"{row['precision']:5} {row['path']:18}"
        if row["status"] != "ok":
            lines.append(f"{head} {row['status']}")
        elif row["path"] == "floor":
            lines.append(f"{head} {'':>10} {'':>7} {'':>7} {'':>6} {row['ms_per_token']:7.2f} "
                         f"{row['tokens_per_s']:7.1f}   ({row['matrices_mib']:.0f} MiB of matrices)")
        else:
            rss = "-" if row["peak_rss_growth_mib"] is None else f"{row['peak_rss_growth_mib']:.1f}"
            same = "".join(f"  same tokens as {whom}: {row[key]}" for key, whom in
                           (("same_tokens_as_ours", "archspec"), ("same_tokens_as_eager", "eager")) if key in row)
            lines.append(f"{head} {row['prefill_ms']:10.2f} {row['ms_at_16']:7.2f} {row['ms_at_upto']:7.2f} "
                         f"{row['upto_over_16']:6.3f} {row['ms_per_token']:7.2f} {row['tokens_per_s']:7.1f} "
                         f"{row['at_16_over_floor']:8.2f}x {row['mean_over_floor']:9.2f}x "
                         f"{row['ours_over_this']:8.2f}x {rss:>8}{same}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama"], choices=list(SIZES))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=8)
    parser.add_argument("--upto", type=int, default=240, help="decode until this position (at least 16 + 3)")
    parser.add_argument("--json", metavar="FILE", help="also write the results here")
    args = parser.parse_args()
    if args.upto < 19 or args.prompt >= 14:
        parser.error("--upto must be at least 19 and --prompt at most 13 (position 16 is a decode step)")
    if args.threads:
        torch.set_num_threads(args.threads)
    log = lambda s: print(f"... {s}", file=sys.stderr, flush=True)  # noqa: E731
    load = os.getloadavg()
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f} at start", flush=True)
    results = []
    for spec in args.models:
        result = bench(spec, list(dict.fromkeys(args.precisions)), args.prompt, args.upto, args.rounds, log,
                       args.device)
        results.append(result)
        print(table(result), flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at end", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
