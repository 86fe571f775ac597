"""Fixed tables made once at build, in float64 and rounded once to float32: the sinusoids of
embed's `pos: sincos` and of constant's `fill: sinusoid`."""

from __future__ import annotations

import math

import torch


def sinusoid_table(length: int, dim: int, layout: str = "interleaved"):
    """Vaswani et al.: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...); layout
    "halves" the sines in the first dim/2 columns and the cosines after (Marian); "fairseq" so, at
    the frequencies 10000^(-i/(d/2 - 1)) (tensor2tensor's, fairseq's, Whisper's). [length, dim]"""
    half = dim // 2
    position = torch.arange(length, dtype=torch.float64)[:, None]  # [L, 1]
    if layout == "fairseq":
        rate = torch.exp(torch.arange(half, dtype=torch.float64) * (-math.log(10000.0) / max(half - 1, 1)))  # [dim/2]
    else:
        rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))  # [dim/2]
    angle = position * rate  # [L, dim/2], float64 (computed once; a long table's transient memory is its size x 3)
    table = torch.empty(length, dim)  # [L, dim], float32: each value is the float64 result rounded once
    sines, cosines = (slice(0, half), slice(half, dim)) if layout in ("halves", "fairseq") else \
        (slice(0, dim, 2), slice(1, dim, 2))
    table[:, sines] = torch.sin(angle)
    table[:, cosines] = angle.cos_()
    return table
