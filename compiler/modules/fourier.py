"""fourier (torch): the real or imaginary part of torch.fft.fftn over the given axes."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from archspec.primitives.ops.fourier import FOURIER

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Fourier(nn.Module):
    """Re or Im of the n-D DFT over `axes`: torch.fft.fftn where the module runs (eager,
    torch.compile); while exporting (ONNX, TensorRT, .pt2), one DFT matrix product per axis (the
    same sums, made at the input's sizes, so a dynamic length exports; no FFT op needed)."""

    def __init__(self, axes, part="real"):
        super().__init__()
        self.axes, self.part = tuple(axes), part

    def forward(self, x):
        wide = x if x.dtype == torch.float64 else x.float()  # no half-precision FFT on the CPU
        if torch.compiler.is_exporting():
            real, imaginary = dft(wide, self.axes)  # each x's shape
        else:
            spectrum = torch.fft.fftn(wide, dim=self.axes)  # complex, x's shape
            real, imaginary = spectrum.real, spectrum.imag
        return (real if self.part == "real" else imaginary).to(x.dtype)

    def extra_repr(self) -> str:
        return f"axes={self.axes}, part={self.part}"


def dft(x, axes):
    """The real and imaginary parts of the DFT of real x over `axes`, one axis at a time:
    X[k] = sum_n x[n] (cos - i sin)(2 pi k n / N), with k n taken modulo N in integers first, so
    the angles stay exact at any length."""
    real, imaginary = x, None
    for axis in axes:
        cos, sin = dft_matrices(x.shape[axis], x)  # [N, N] each, symmetric
        moved = real.movedim(axis, -1)  # [..., N]
        if imaginary is None:
            real, imaginary = moved @ cos, -(moved @ sin)  # [..., N]
        else:
            other = imaginary.movedim(axis, -1)  # [..., N]
            real, imaginary = moved @ cos + other @ sin, other @ cos - moved @ sin  # [..., N]
        real, imaginary = real.movedim(-1, axis), imaginary.movedim(-1, axis)  # x's shape
    return real, imaginary


def dft_matrices(n, like):
    """cos and sin of 2 pi k n / N for every k, n < N, [N, N] each, in `like`'s dtype and device."""
    index = torch.arange(n, device=like.device)  # [N]
    size = index[-1:] + 1  # [1]: N as a tensor (an exported remainder by a symbolic int fails in ONNX)
    turns = torch.remainder(index[:, None] * index[None, :], size)  # [N, N]: k n mod N, exact in int64
    angle = turns.to(like.dtype) * (2 * math.pi) / size.to(like.dtype)  # [N, N] (no float of a symbolic N)
    return angle.cos(), angle.sin()


@lowering(FOURIER)
def lower(p, inputs, ctx):
    rank = len(inputs[0].shape)
    return make(Fourier, axes=tuple(axis % rank for axis in p.axes), part=p.part)


register_facts(FOURIER, grid=KEEPS, classifier=None, resample=None)
