"""Speed of archspec-built models against the same architectures from timm.

One process, the same threads, the same weights (timm's copied into ours), interleaved
rounds, medians; batch 1 and 8; eager and torch.compile. Prints a table of milliseconds per
forward and the ratio ours / timm (below 1.0: archspec is faster).

    python tests/benchmarks/bench_vs_timm.py [--specs swin_t vit_b16] [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
PAIRS = {
    "vit_b16": "vit_base_patch16_224",
    "swin_t": "swin_tiny_patch4_window7_224",
    "vit_s16": "vit_small_patch16_224",
    "swin_s": "swin_small_patch4_window7_224",
    "pvt_v2_b2": "pvt_v2_b2",
}


def build_pair(spec: str):
    import timm

    import archspec
    from archspec.compiler.weights.load import load_weights

    reference = timm.create_model(PAIRS[spec], pretrained=False).eval()
    ours = archspec.build(str(ROOT / "specs" / f"{spec}.yaml")).eval()
    load_weights(ours, reference.state_dict())
    return ours, reference


def time_once(model, x, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        model(x)
    return (time.perf_counter() - start) / iters * 1000


def measure(ours, reference, x, rounds: int, iters: int) -> tuple[float, float, float]:
    """Interleaved rounds; returns (ours ms, timm ms, max |difference|)."""
    with torch.inference_mode():
        for _ in range(2):  # warm up (and compile)
            ours(x)
            reference(x)
        gap = float((ours(x) - reference(x)).abs().max())
        a, b = [], []
        for r in range(rounds):
            first, second = (ours, reference) if r % 2 == 0 else (reference, ours)
            t1 = time_once(first, x, iters)
            t2 = time_once(second, x, iters)
            a.append(t1 if first is ours else t2)
            b.append(t2 if first is ours else t1)
    return statistics.median(a), statistics.median(b), gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specs", nargs="+", default=["vit_b16", "swin_t"], choices=sorted(PAIRS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--modes", nargs="+", default=["eager", "compile"], choices=["eager", "compile"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} interleaved rounds of {args.iters}, "
          "median ms per forward, fp32, CPU")
    print(f"{'model':10} {'mode':8} {'batch':>5} {'archspec':>10} {'timm':>10} {'ratio':>7} {'max|diff|':>10}")
    for spec in args.specs:
        ours, reference = build_pair(spec)
        for mode in args.modes:
            if mode == "compile":
                torch._dynamo.reset()
                a, b = torch.compile(ours), torch.compile(reference)
            else:
                a, b = ours, reference
            for batch in args.batches:
                x = torch.randn(batch, 3, 224, 224)
                t_ours, t_ref, gap = measure(a, b, x, args.rounds, args.iters)
                print(f"{spec:10} {mode:8} {batch:5d} {t_ours:10.1f} {t_ref:10.1f} {t_ours / t_ref:7.3f} {gap:10.1e}",
                      flush=True)


if __name__ == "__main__":
    main()
