"""fourier: the real (or imaginary) part of the discrete Fourier transform over some axes of a
sample, as FNet mixes its tokens. On tokens `[B, N, C]`, `fourier: {axes: [1, 2]}` is Hugging
Face's FNetBasicFourierTransform, `torch.fft.fftn(x, dim=(1, 2)).real`: the 2-D transform over the
tokens and the channels, of which the real part is kept. Axes count from the batch, as reduce's
do; the batch axis 0 is never transformed. The input is real and the output has its type (its
grid too): the transform runs in float32 (float64 in a float64 model), so a bf16 or fp16 build
rounds only the result."""

from __future__ import annotations

from typing import Literal

from ...core.declared import Field
from ...core.types import TensorType
from ..base import Op, Params, no_cost, require_float
from ..decoding import TOKENWISE, Mixes, register_decoding
from ..dtypes import FLOATS, READS
from ..registry import register
from .reduce import normalised_axes


class FourierParams(Params):
    axes: list[int] = Field([1, 2], min_length=1, max_length=8,
                            description="the axes transformed, counted from the batch (0) or from the end (-1): "
                                        "[1, 2] on tokens is FNet's, over the tokens and the channels")
    part: Literal["real", "imag"] = Field("real", description="the part of the complex transform kept")


class FourierOp(Op):
    """The real or imaginary part of the n-dimensional DFT over `axes`; the output has the input's type."""

    primitive = "fourier"
    Params = FourierParams
    cost = no_cost  # FlopCounterMode counts no FLOPs for an FFT

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        require_float(x, "fourier")
        normalised_axes(p.axes, x, "fourier")
        return x


def fourier_decoding(p: FourierParams):
    """Tokenwise over the channels (the last axis) alone; over any other axis it mixes the tokens."""
    return TOKENWISE if list(p.axes) == [-1] else Mixes("a Fourier transform over an axis other than the last "
                                                         "mixes the tokens")


FOURIER = register(FourierOp())
READS.register(FOURIER, FLOATS)
register_decoding(FOURIER, fourier_decoding)
