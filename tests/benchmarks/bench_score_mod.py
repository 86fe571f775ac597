"""A score graph (`scores: [mod: ...]`) under torch.compile: flex_attention's score_mod (fused, the
causal mask as its block mask; tests/primitives/test_score_mod.py checks that this path is
taken) against the written-out attention (two products and a softmax, as inductor fuses them), ms per
forward, one run, the two interleaved, at two sizes. fp32, CPU, batch 1, one causal layer of 8
heads of 64 with a soft-cap plus a learned per-head bias written as steps.

    python tests/benchmarks/bench_score_mod.py           # prints a table; the machine first
"""

from __future__ import annotations

import copy
import statistics
import subprocess
import time

import torch

import archspec
from archspec.compiler.modules.attention.form import AttentionForm

SPEC = """
name: bench_mod
inputs:
  x: [B, {n}, 512]
graph:
  - {{id: head_bias, param: {{shape: [8]}}}}
  - id: attn
    from: [x, head_bias]
    attention:
      kind: causal
      heads: 8
      norm: none
      residual: false
      scores:
        - mod:
            tensors: [head_bias]
            steps:
              - {{t: {{divide: [score, 30.0]}}}}
              - {{squashed: {{tanh: t}}}}
              - {{capped: {{multiply: [squashed, 30.0]}}}}
              - {{bias: {{at: [head_bias, h]}}}}
              - {{out: {{add: [capped, bias]}}}}
outputs: [attn]
"""


def timed(fn, x, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main(sizes=(256, 1024), repeats: int = 20) -> None:
    machine = subprocess.run(["grep", "-m1", "model name", "/proc/cpuinfo"], capture_output=True, text=True).stdout
    print(machine.strip(), f"| threads {torch.get_num_threads()} | torch {torch.__version__}")
    print("| tokens | fused (flex score_mod) ms | written out ms | fused / written |")
    print("|---|---|---|---|")
    for n in sizes:
        model = archspec.build_text(SPEC.format(n=n)).eval()
        plain = copy.deepcopy(model)
        for module in plain.modules():
            if isinstance(module, AttentionForm):
                module.written = True  # flexes() says no: the written-out form (form.py), as the aoti target's
        x = torch.randn(1, n, 512)
        fused, written = torch.compile(model, dynamic=False), torch.compile(plain, dynamic=False)
        with torch.no_grad():
            expected = model(x)
            for compiled in (fused, written):
                compiled(x)
                assert torch.allclose(compiled(x), expected, atol=1e-4)
            a, b = [], []
            for _ in range(repeats):  # interleaved
                a += timed(fused, x, 1)
                b += timed(written, x, 1)
        fa, wb = statistics.median(a), statistics.median(b)
        print(f"| {n} | {fa:.2f} | {wb:.2f} | {fa / wb:.2f} |")


if __name__ == "__main__":
    main()
