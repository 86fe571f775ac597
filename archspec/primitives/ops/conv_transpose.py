"""conv_transpose: a transposed convolution (torch's ConvTranspose2d / ConvTranspose1d), which
upsamples: 2-D over an image or a token grid, or 1-D along tokens of a fixed length.

    conv_transpose: {dim: 2, out: 256, kernel: 4, stride: 4}    # DPT's reassemble: 14x14 -> 56x56

Each output size is (n - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1,
torch's formula. dim 2 gives the layout it read (a token grid gives a token grid of the new
size). `out` defaults to the input's channels; `groups: depthwise` is one group per channel.
Kernel, stride, padding, output_padding and dilation are an int or a pair [h, w] (dim 2). The
weight is torch's `[in, out / groups, *kernel]`, so a reference's state dict loads as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from ...core.declared import Field
from ...core.suggestions import Remedy
from ...core.types import Sym, TensorType, grid_tokens, image, tokens
from ..base import Cost, NonNegSize, Op, Params, PositiveInt, PositiveSize, RuleError
from ..grids import as_image
from ..registry import register
from ..dtypes import READS, FLOAT_FIRST
from ..decoding import Mixes, register_decoding
from .conv import check_channels, groups_of, one_d_hint, per_axis


class ConvTransposeParams(Params):
    dim: Literal[1, 2] = Field(2, description="2: over an image or a token grid; 1: along the tokens")
    out: PositiveInt | None = Field(None, description="output channels (default: the input's channels)")
    kernel: PositiveSize = Field(description="kernel size: an int, or [kh, kw] (dim 2)")
    stride: PositiveSize = Field(1, description="the upsampling factor: an int, or [sh, sw] (dim 2)")
    padding: NonNegSize = Field(0, description="dilation * (kernel - 1) - padding zeros on each side of the "
                                               "input (torch's padding): an int, or [ph, pw] (dim 2)")
    output_padding: NonNegSize = Field(0, description="one side's extra size (torch's output_padding), smaller "
                                                      "than the stride or the dilation: an int, or [h, w] (dim 2)")
    dilation: PositiveSize = Field(1, description="spacing of the kernel's taps: an int, or [dh, dw] (dim 2)")
    groups: Union[PositiveInt, Literal["depthwise"]] = Field(
        1, description="channel groups; depthwise: one group per input channel")
    bias: bool = True


@dataclass(frozen=True)
class Geometry:
    """One entry per convolved axis (H, W or N)."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    output_padding: tuple[int, ...]
    dilation: tuple[int, ...]

    def out_sizes(self, sizes: tuple) -> tuple:
        """torch's output size along each axis (sizes may be torch SymInts while exporting)."""
        return tuple((n - 1) * s - 2 * p + d * (k - 1) + extra + 1
                     for n, k, s, p, extra, d in zip(sizes, self.kernel, self.stride, self.padding,
                                                     self.output_padding, self.dilation))

    def keeps_size(self) -> bool:
        """Whether every output size equals its input size, whatever the input."""
        return all(s == 1 and d * (k - 1) + extra == 2 * p for k, s, p, extra, d in
                   zip(self.kernel, self.stride, self.padding, self.output_padding, self.dilation))


def geometry(p: ConvTransposeParams) -> Geometry:
    """The geometry per axis, or a RuleError naming the parameter: output_padding below the stride
    or the dilation (torch refuses the rest at run time)."""
    g = Geometry(*(per_axis(p, name, "conv_transpose")
                   for name in ("kernel", "stride", "padding", "output_padding", "dilation")))
    for s, extra, d in zip(g.stride, g.output_padding, g.dilation):
        if extra >= max(s, d):
            raise RuleError(f"output_padding {extra} must be smaller than the stride {s} or the dilation {d}",
                            field="output_padding", hint=Remedy(f"use an output_padding below {max(s, d)}"))
    return g


def check_not_empty(g: Geometry, sizes: tuple[int, ...]) -> None:
    """Every output size is at least 1."""
    for size, n in zip(g.out_sizes(sizes), sizes):
        if size < 1:
            raise RuleError(f"padding takes all of the output of an input of {n} away: its size would be "
                            f"{size}", field="padding", hint=Remedy("use a smaller padding"))


class ConvTransposeOp(Op):
    """2-D over an image or a token grid (giving the layout it read), or 1-D along tokens [B, N, C]."""

    primitive = "conv_transpose"
    Params = ConvTransposeParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        g = geometry(p)
        return self.image_shape(p, g, x) if p.dim == 2 else self.sequence_shape(p, g, x)

    def image_shape(self, p, g: Geometry, x: TensorType) -> TensorType:
        if x.layout == "tokens" and not x.grid:
            raise RuleError(f"a 2-D conv_transpose reads an image or a token grid, got {x.layout_name()}",
                            field="dim", hint=Remedy("use dim: 1 to convolve along the tokens"))
        channels, size, origin = as_image(x, "a 2-D conv_transpose")
        check_channels(p, channels)
        check_not_empty(g, size)
        grid = g.out_sizes(size)  # (H, W) -> (H', W')
        step = origin if grid == size else origin.then("conv_transpose", *(g.kernel + g.stride))
        out = p.out or channels
        if x.layout == "image":
            return image(out, grid[0], grid[1], origin=step)  # [B, out, H', W']
        return grid_tokens(grid, out, origin=step)  # [B, H'W', out]

    def sequence_shape(self, p, g: Geometry, x: TensorType) -> TensorType:
        if x.layout != "tokens":
            hint = one_d_hint(x)
            raise RuleError(f"a 1-D conv_transpose reads tokens [B, N, C], got {x.layout_name()}", field="dim",
                            hint=Remedy(hint.replace("conv", "conv_transpose")) if hint else None)
        check_channels(p, x.channels)
        out = p.out or x.channels
        if g.keeps_size():
            return tokens(x.length, out, grid=x.grid)  # [B, N, C] -> [B, N, out]
        if isinstance(x.length, Sym):
            raise RuleError(f"a 1-D conv_transpose that changes the length reads a fixed length, got "
                            f"{x.length}", field="stride", hint=Remedy("declare the input's length as a number"))
        check_not_empty(g, (x.length,))
        (length,) = g.out_sizes((x.length,))
        return tokens(length, out)  # [B, N, C] -> [B, N', out]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        channels = as_image(x, "a 2-D conv_transpose")[0] if p.dim == 2 else x.channels
        width = out.channels
        taps = width // groups_of(p, channels)  # each input value reaches out / groups channels ...
        for k in geometry(p).kernel:
            taps *= k  # ... at every tap of the kernel
        positions = x.row_numel() // channels  # the input's H*W or N per row of the batch
        return Cost(channels * taps + (width if p.bias else 0), 2 * channels * taps * positions)


CONV_TRANSPOSE = register(ConvTransposeOp())
READS.register(CONV_TRANSPOSE, FLOAT_FIRST)
register_decoding(CONV_TRANSPOSE, Mixes("a transposed conv spreads each token over the ones around it"))
