"""conv_transpose (torch): nn.ConvTranspose2d over an image or a token grid, nn.ConvTranspose1d
along tokens; the parameters and state dict are torch's (`conv.weight` [in, out / groups, *k])."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.grids import as_image
from archspec.primitives.ops.conv import groups_of
from archspec.primitives.ops.conv_transpose import CONV_TRANSPOSE, geometry

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import grid_as_image, image_as_tokens, make


class TransposedConvolution(nn.Module):
    """`reads`: "image" [B, C, H, W] -> [B, out, H', W']; "grid" [B, H*W, C] -> [B, H'*W', out]
    (`grid`: the (H, W) it reads); "tokens" [B, N, C] -> [B, N', out] (1-D along N)."""

    def __init__(self, reads, in_channels, out, kernel, stride, padding, output_padding, dilation, groups, bias,
                 grid=None):
        super().__init__()
        self.reads, self.grid = reads, tuple(grid) if grid is not None else None
        conv = nn.ConvTranspose1d if reads == "tokens" else nn.ConvTranspose2d
        self.conv = conv(in_channels, out, kernel, stride, padding=padding, output_padding=output_padding,
                         groups=groups, bias=bias, dilation=dilation)

    def forward(self, x):
        if self.reads == "tokens":
            x = x.transpose(1, 2)  # [B, N, C] -> [B, C, N]
        elif self.reads == "grid":
            x = grid_as_image(x, self.grid)  # [B, HW, C] -> [B, C, H, W]
        x = self.conv(x)  # [B, C, *S] -> [B, out, *S']
        if self.reads != "image":
            x = image_as_tokens(x)  # [B, out, H', W'] -> [B, H'W', out]; [B, out, N'] -> [B, N', out]
        return x


@lowering(CONV_TRANSPOSE)
def lower(p, inputs, ctx):
    (x,) = inputs
    g = geometry(p)
    channels = as_image(x, "a 2-D conv_transpose")[0] if p.dim == 2 else x.channels
    reads = "tokens" if p.dim == 1 else "grid" if x.layout == "tokens" else "image"
    return make(TransposedConvolution, reads=reads, in_channels=channels, out=p.out or channels,
                kernel=list(g.kernel), stride=list(g.stride), padding=list(g.padding),
                output_padding=list(g.output_padding), dilation=list(g.dilation), groups=groups_of(p, channels),
                bias=p.bias, grid=x.grid if reads == "grid" else None)


def transposed_grid(p, grid):
    """The token grid after the transposed conv: dim 2 maps (H, W) by torch's formula (sizes may
    be torch SymInts while exporting); a 1-D one has a grid only where it keeps the length."""
    return geometry(p).out_sizes(grid) if p.dim == 2 else grid  # (H, W) -> (H', W')


register_facts(CONV_TRANSPOSE, grid=transposed_grid, classifier=None, resample=None)
