"""How an attention module computes softmax(q·k^T·scale + mask)·v: a lowering choice, not a
different network.

- fused (the default): one F.scaled_dot_product_attention call. Eager runs torch's flash or
  math kernel; ONNX export writes it as one Attention op (ONNX Runtime's fused kernel);
  TensorRT converts it as one op.
- written out: the two products and the softmax as plain ops, for inductor to compile. In an
  AOTInductor package (build --target aoti, CPU) inductor then fuses the scale, the mask add
  and the softmax into one loop between two batched matmuls. For short key rows in bf16 that
  can beat SDPA's CPU flash kernel, which is made for long ones: on an AMD EPYC (no AMX) Swin's
  49-key windows took 0.94x the package's time with SDPA, ViT's 197 tokens 0.91-0.99x, PVT's
  49 reduced keys the same time either way; on an Intel Xeon without AMX it was a wash (swin_t
  0.96-1.02x, swinv2_t 1.03x). In fp32 it is not used: there it gained at most 8% on the AMD
  EPYC (swinv2_t at batch 1; 0.96-1.02x elsewhere) and cost 1.20-1.51x on the Intel Xeon
  (swin_t 1.51x and 1.36x at batch 1 and 8, swinv2_t 1.34x and 1.20x; 2 threads,
  tests/benchmarks/bench_attention_form.py; pvt_v2_b2's package calls SDPA either way). A long
  row keeps the fused kernel, which never holds the whole [N, M] score matrix.
  torch.compile on the CPU (`bench --target compile`, a user's own compile of the module) writes
  short bf16 rows out too: with inductor's freezing, 0.92-0.97x the time with SDPA for swin_t,
  vit_b16, swinv2_t and pvt_v2_b2 at batch 1 and 8 (pvt_v2_b2 at batch 8: 1.00; AMD EPYC, 2
  threads, bench_attention_form.py --jit; tests/benchmarks/results/attention_form_jit_bf16_epyc_2026-12-01.txt).
- not on a CPU with AMX: there SDPA's kernel runs the products on AMX tiles and the written form
  lost everywhere measured (an Intel Xeon with AMX-BF16, 2 threads, bf16, written / SDPA: the
  package 1.09 and 1.08 for swin_t at batch 1 and 8, 1.15 and 1.03 for swinv2_t; the frozen JIT
  1.01-1.08 for swin_t, 1.02-1.06 vit_b16, 1.14-1.23 swinv2_t;
  tests/benchmarks/results/attention_form_xeon_amx_2026-12-01.txt, attention_form_jit_bf16_xeon_amx_2026-12-01.txt).

`attention_written_out(model)` turns the written form on for every attention module of a
model while a program is traced (the aoti target's export); torch.compile on the CPU turns it on
by itself (AttentionForm.wants_written); eager, torch.export (ONNX, TensorRT) and the GPU keep SDPA.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F

from archspec.core.isa import read_isa

WRITTEN_MAX_KEYS = 256  # bf16 key rows up to this long are written out when asked for; longer stay fused
WRITTEN_MAX_KEYS_FP32 = 0  # fp32 rows are never written out (up to 1.51x slower on an Intel Xeon: above)
WRITTEN_MAX_KEYS_AMX = 0  # nor bf16 rows on a CPU with AMX (1.01-1.23x slower there: above)
# Read once, at import: a file read while torch.compile traces a forward is a graph break in
# every attention module (swin_t bf16 at batch 1 took 31.8 ms compiled frozen, 19.1 without).
CPU_HAS_AMX = read_isa().has("amx_bf16")


def longest_written_row(dtype: torch.dtype) -> int:
    """The longest key row written out in `dtype` on this CPU (0: none)."""
    if dtype == torch.float32:
        return WRITTEN_MAX_KEYS_FP32
    return WRITTEN_MAX_KEYS_AMX if CPU_HAS_AMX else WRITTEN_MAX_KEYS


class AttentionForm:
    """Mixed into the attention modules: `written` is set only inside attention_written_out()."""

    written = False

    def writes_out(self, keys, like: torch.Tensor) -> bool:
        """Whether attention over `keys` keys per query, on the queries `like` (their dtype and
        device), is written out: wanted (wants_written), and a short row of a size known when
        the program is traced (a dynamic length stays fused)."""
        return self.wants_written(like) and isinstance(keys, int) and keys <= longest_written_row(like.dtype)

    def wants_written(self, like: torch.Tensor) -> bool:
        """Asked for (the aoti target's export), or traced by torch.compile on the CPU, where
        inductor compiles the module just in time as it would in a package (not torch.export,
        whose ONNX and TensorRT targets take the fused op, and not eager)."""
        if self.written:
            return True
        return like.device.type == "cpu" and torch.compiler.is_compiling() and not torch.compiler.is_exporting()


def written_attention(q, k, v, mask=None, scale=None, dropout: float = 0.0):
    """softmax(q·k^T·scale + mask)·v as plain ops: q [..., N, d], k and v [..., M, d] -> [..., N, d]."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # [..., N, M]; the scale goes into the softmax's loop
    if mask is not None:
        scores = scores + mask
    weights = softmax_written(scores)
    if dropout:
        weights = F.dropout(weights, dropout)
    return weights @ v  # [..., N, d]


def softmax_written(scores):
    """softmax over the last dimension as exp and sums, which inductor fuses into one loop as it
    does softmax itself. Not softmax: inductor's attention patterns (fx_passes/fuse_attention.py)
    look for matmul, softmax, matmul and put SDPA's flash kernel back, with copies around it
    (PVT v2's package took 1.09-1.20x the fused one's time that way)."""
    shifted = scores - scores.amax(dim=-1, keepdim=True)  # [..., N, M]
    weights = shifted.exp()
    return weights / weights.sum(dim=-1, keepdim=True)


@contextmanager
def attention_written_out(model: torch.nn.Module):
    """Within: every attention module of `model` writes its attention out where its key rows are
    short (AttentionForm.writes_out); afterwards each is as it was."""
    forms = [m for m in model.modules() if isinstance(m, AttentionForm)]
    for module in forms:
        module.written = True
    try:
        yield model
    finally:
        for module in forms:
            del module.written  # back to the class's False
