"""Decoding speed of archspec's generate() (compiler/generate/) against Hugging Face's eager
generate on the same weights, and against the memory-bandwidth floor, in one process.

For each model (GPT-2 small and the shipped Llama, fp32, batch 1): a prompt of --prompt
tokens, then greedy decoding to position --upto. Per round, interleaved (the order rotating):

  archspec     generate(model, ids, ...) with its static key/value cache
  hf           transformers' model.generate(ids, ...) (its default attention and cache)
  floor        one batch-1 matrix-vector product over every matrix a token passes through
               (each Linear, the lm head; the embedding is a row read, left out): what a
               decode step costs if it only streamed its weights once

Each step's time is taken between the streamer's put() calls (the first is the prefill).
Reported: prefill ms, decode ms per token at positions 16 and --upto (240) (median of the 5 steps
around each), decode tokens/s over all steps (medians over the rounds), the same per-token
times in the best round (on a busy machine, the least disturbed) with their ratio and the
ratio of the step at 16 to the best floor, and the resident-set peak growth of each path's
first run.

    python tests/benchmarks/bench_generate.py --threads 2 [--models gpt2 llama] [--rounds 5]

(not under `nice` on a busy machine: it then gets a few per cent of a core). The resident-set
growth is of the process's high-water mark, 0 when loading the two models already set it higher.

Also checks that both produce the same tokens (greedy).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def reference(spec: str):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    if spec == "gpt2":
        return GPT2LMHeadModel._from_config(GPT2Config())
    config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048,
                         rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
    return LlamaForCausalLM._from_config(config)


def pair(spec: str):
    import archspec
    from archspec.compiler.weights.load import load_weights

    torch.manual_seed(0)
    ref = reference(spec).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    ours = archspec.build(str(ROOT / "specs" / f"{spec}.yaml")).eval()
    load_weights(ours, ref.state_dict())
    return ref, ours


class StepTimes:
    """A streamer recording the time of each put(): the prompt, then each new token."""

    def __init__(self):
        self.stamps = []

    def put(self, tokens):
        self.stamps.append(time.perf_counter())

    def end(self):
        pass

    def steps(self) -> list[float]:
        """Seconds per produced token: [prefill (with the first choice), decode step 1, ...]."""
        return [b - a for a, b in zip(self.stamps, self.stamps[1:])]


def matrices(model: nn.Module) -> list[torch.Tensor]:
    """Every weight matrix a decoded token is multiplied by (2-D parameters but embeddings' tables,
    which a token only reads a row of; a tied lm head's table counted once, as the head)."""
    from archspec.compiler.modules.embed import TokenEmbed

    tables = {id(m.tokens.weight) for m in model.modules() if isinstance(m, TokenEmbed) and m.tokens is not None}
    tables |= {id(m.pos.weight) for m in model.modules() if isinstance(m, TokenEmbed) and m.pos is not None}
    found, seen = [], set()
    for m in model.modules():
        for p in m.parameters(recurse=False):
            if p.dim() == 2 and id(p) not in seen and (id(p) not in tables or m.__class__.__name__ != "Embedding"):
                seen.add(id(p))
                found.append(p.detach())
    head_tables = [m.table.weight for m in model.modules() if getattr(m, "table", None) is not None
                   and isinstance(m.table, nn.Embedding)]
    for t in head_tables:  # the tied head multiplies by the token table
        if id(t) not in seen:
            seen.add(id(t))
            found.append(t.detach())
    return found


def floor_time(weights: list[torch.Tensor], repeats: int = 20) -> float:
    """Median seconds of one batch-1 pass of matrix-vector products over `weights`."""
    inputs = [torch.randn(1, w.shape[1]) for w in weights]
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            for x, w in zip(inputs, weights):
                F.linear(x, w)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(ours, ids, new):
    from archspec.compiler.generate import generate

    streamer = StepTimes()
    out = generate(ours, ids, max_new_tokens=new, streamer=streamer)
    return out, streamer.steps()


def run_hf(ref, ids, new):
    streamer = StepTimes()
    with torch.no_grad():
        out = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                           pad_token_id=0, streamer=streamer)
    return out, streamer.steps()


def around(steps: list[float], prompt: int, position: int, span: int = 2) -> float:
    """Median decode-step time for the token at `position` (the step that feeds position - 1)."""
    index = position - prompt  # steps[0] is the prefill, steps[k] feeds position prompt + k - 1
    window = steps[max(1, index - span): index + span + 1]
    return statistics.median(window)


def bench(spec: str, prompt: int, upto: int, rounds: int) -> dict:
    """The figures of one model (see the module docstring); the late position is `upto`."""
    ref, ours = pair(spec)
    ids = torch.randint(0, 1000, (1, prompt), generator=torch.Generator().manual_seed(1))
    new = upto - prompt + 3
    weights = matrices(ours)
    weight_mib = sum(w.numel() * w.element_size() for w in weights) / 2 ** 20
    samples = {"archspec": [], "hf": [], "floor": []}
    peaks, same = {}, None
    runners = [("archspec", lambda: run_ours(ours, ids, new)), ("hf", lambda: run_hf(ref, ids, new)),
               ("floor", lambda: (None, [floor_time(weights)]))]
    for r in range(rounds):
        order = runners[r % 3:] + runners[: r % 3]
        outs = {}
        for name, fn in order:
            before = rss_peak_mib()
            outs[name], steps = fn()
            if r == 0:
                peaks[name] = rss_peak_mib() - before
            samples[name].append(steps)
        same = torch.equal(outs["archspec"], outs["hf"]) if same is None else same and torch.equal(
            outs["archspec"], outs["hf"])
    floor = min(s[0] for s in samples["floor"])  # the least disturbed: the ratios against it are the harsher
    result = {"spec": spec, "prompt": prompt, "new_tokens": new, "matrices_mib": round(weight_mib, 1),
              "floor_ms_best": round(floor * 1e3, 3),
              "floor_ms_median": round(statistics.median(s[0] for s in samples["floor"]) * 1e3, 3),
              "same_tokens": same}
    for name in ("archspec", "hf"):
        result[name] = figures(samples[name], prompt, upto, floor, peaks[name])
    return result


def figures(runs: list[list[float]], prompt: int, upto: int, floor: float, peak: float) -> dict:
    """One path's figures over the rounds: medians, and the best round (on a busy machine the
    least disturbed one) for the per-token times."""
    early = [around(s, prompt, 16) for s in runs]
    late = [around(s, prompt, upto) for s in runs]
    decode = statistics.median(statistics.mean(s[1:]) for s in runs)
    best = min(range(len(runs)), key=lambda i: early[i] + late[i])
    return {"prefill_ms": round(statistics.median(s[0] for s in runs) * 1e3, 2),
            "ms_per_token_at_16": round(statistics.median(early) * 1e3, 2),
            f"ms_per_token_at_{upto}": round(statistics.median(late) * 1e3, 2),
            "decode_tokens_per_s": round(1 / decode, 1),
            "best_round_ms_at_16": round(early[best] * 1e3, 2),
            f"best_round_ms_at_{upto}": round(late[best] * 1e3, 2),
            f"best_round_{upto}_over_16": round(late[best] / early[best], 3),
            "best_round_16_over_floor": round(early[best] / floor, 3),
            "rss_peak_growth_mib_first_run": round(peak, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama"], choices=["gpt2", "llama"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=8)
    parser.add_argument("--upto", type=int, default=240, help="decode until this position (at least 16 + 3)")
    parser.add_argument("--json", metavar="FILE", help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f} at start", flush=True)
    results = []
    for spec in args.models:
        result = bench(spec, args.prompt, args.upto, args.rounds)
        results.append(result)
        print(json.dumps(result, indent=1), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at end", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
