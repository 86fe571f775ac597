"""Attention sinks (`scores: [sinks]`, GPT-OSS) in eager: one SDPA call with a zero key and value
per sink (kernel.py `sunk`, the path taken) against the written-out softmax with the sinks'
column (`written_out`, the path before), ms per forward, one process, the two interleaved, at
two lengths. fp32, CPU, batch 1, one causal layer of 8 heads of 64 (2 key/value heads), rotary.

    python tests/benchmarks/bench_sinks.py [--threads 2]     # prints a table; the machine first
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import archspec
from archspec.compiler.modules.attention.kernel import AttentionKernel

SPEC = """
name: bench_sinks
inputs:
  x: [B, {n}, 512]
graph:
  - {{id: attn, attention: {{kind: causal, heads: 8, kv_heads: 2, rope_theta: 10000.0, scores: [sinks]}}}}
outputs: [attn]
"""


def timed(model, x, repeats: int) -> float:
    with torch.no_grad():
        begin = time.perf_counter()
        for _ in range(repeats):
            model(x)
        return (time.perf_counter() - begin) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"{cpu}, torch {torch.__version__}, {args.threads} threads, {args.rounds} interleaved rounds, median")
    print(f"{'tokens':>7} {'fused (SDPA) ms':>16} {'written out ms':>15} {'fused/written':>14} {'max |diff|':>11}")
    fused_path = AttentionKernel.sinks_alone
    for n, repeats in ((256, 20), (1024, 4)):
        model = archspec.build_text(SPEC.format(n=n), seed=0).eval()
        with torch.no_grad():
            model.get_submodule("attn").sinks.sinks.copy_(torch.randn(8))
        x = torch.randn(1, n, 512)
        times = {"fused": [], "written": []}
        outs = {}
        for _ in range(args.rounds):
            for name in times:
                AttentionKernel.sinks_alone = fused_path if name == "fused" else (lambda self, parts: False)
                try:
                    timed(model, x, 1)  # warm
                    times[name].append(timed(model, x, repeats))
                    with torch.no_grad():
                        outs[name] = model(x)
                finally:
                    AttentionKernel.sinks_alone = fused_path
        fused, written = statistics.median(times["fused"]), statistics.median(times["written"])
        diff = (outs["fused"] - outs["written"]).abs().max().item()
        print(f"{n:>7} {fused:>16.3f} {written:>15.3f} {fused / written:>14.2f} {diff:>11.2e}")


if __name__ == "__main__":
    main()
