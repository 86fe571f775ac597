"""conv (torch): a 2-D convolution over an image or a token grid (the fast Conv2d), or a 1-D one
along tokens (nn.Conv1d); zeros padded unevenly (causal, or same with an even reach) go in with
F.pad first."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.grids import as_image
from archspec.primitives.ops.conv import CONV, geometry, groups_of

from ..facts import register_facts
from ..lowering_rules import lowering
from .activations import activation
from .common import Conv2d, grid_as_image, image_as_tokens, make


class Convolution(nn.Module):
    """`reads`: "image" [B, C, H, W] -> [B, out, H', W']; "grid" [B, H*W, C] -> [B, H'*W', out]
    (`grid`: the (H, W) it reads); "tokens" [B, N, C] -> [B, N', out] (1-D along N). `pads`:
    (before, after) zeros per convolved axis."""

    def __init__(self, reads, in_channels, out, kernel, stride, dilation, pads, groups, bias, grid=None,
                 weight_norm=None, padding_mask=False, norm="none", norm_eps=1e-5, act=None):
        super().__init__()
        self.reads, self.grid = reads, tuple(grid) if grid is not None else None
        self.padding_mask = padding_mask  # tokens: a mask [B, N] follows x, and a padded token reads as zeros
        even = all(before == after for before, after in pads)
        self.pad = None if even else [side for before, after in reversed(pads) for side in (before, after)]
        conv = nn.Conv1d if reads == "tokens" else Conv2d if weight_norm is None else nn.Conv2d
        self.conv = conv(in_channels, out, kernel, stride, padding=[before for before, _ in pads] if even else 0,
                         dilation=dilation, groups=groups, bias=bias)
        self.weight_norm = weight_norm  # the axis g keeps (torch's weight_norm `dim`), or None
        if weight_norm is not None:  # conv.weight -> weight_g (its norm, so that the weight starts as it was), weight_v
            v = self.conv.weight.detach()
            del self.conv.weight
            self.conv.weight_g = nn.Parameter(norm_except(v, weight_norm))  # [1, .., size, .., 1]
            self.conv.weight_v = nn.Parameter(v)
        batch_norm = nn.BatchNorm1d if reads == "tokens" else nn.BatchNorm2d
        self.norm = batch_norm(out, eps=norm_eps) if norm == "batch" else None  # a ConvModule's, over the output channels
        self.act = activation(act) if act is not None else None

    def normed_weight(self):
        """The conv's weight: g * v / ||v||, the norm over every axis but weight_norm's."""
        v, g = self.conv.weight_v, self.conv.weight_g
        return v * (g / norm_except(v, self.weight_norm))  # [out, in / groups, *kernel]

    def forward(self, x, *mask, cache=None):
        """`mask` (with padding_mask): [B, N], 0 where a token is padding, whose input then reads as
        zeros. `cache`: while generate() decodes a causal conv, its recent inputs (generate/cache.py's
        RecentTokens), which convolve the current tokens after the ones they hold."""
        if mask:
            x = x * mask[0][:, :, None].to(x.dtype)  # [B, N, C]: padded tokens' inputs zeroed
        if cache is not None:
            return cache.convolve(self.convolve, x)
        return self.convolve(x)

    def convolve(self, x):
        if self.reads == "tokens":
            x = x.transpose(1, 2)  # [B, N, C] -> [B, C, N]
        elif self.reads == "grid":  # a token grid read as an image, channels-last (a view)
            x = grid_as_image(x, self.grid)  # [B, HW, C] -> [B, C, H, W]
        if self.pad is not None:
            x = F.pad(x, self.pad)  # [B, C, *S] -> [B, C, *(S + before + after)]
        if self.weight_norm is None:
            x = self.conv(x)  # [B, C, *S] -> [B, out, *S']
        else:
            x = self.conv._conv_forward(x, self.normed_weight(), self.conv.bias)  # [B, C, *S] -> [B, out, *S']
        if self.norm is not None:
            x = self.norm(x)
        if self.act is not None:
            x = self.act(x)
        if self.reads != "image":
            x = image_as_tokens(x)  # [B, out, H', W'] -> [B, H'W', out]; [B, out, N'] -> [B, N', out]
        return x


def norm_except(v, dim: int):
    """The L2 norm of v over every axis but `dim` (torch's norm_except_dim), kept as size-1 axes."""
    axes = [axis for axis in range(v.dim()) if axis != dim]
    return v.pow(2).sum(dim=axes, keepdim=True).sqrt()  # [out, in, *k] -> [1, .., size of dim, .., 1]


@lowering(CONV)
def lower(p, inputs, ctx):
    x = inputs[0]
    g = geometry(p)
    channels = as_image(x, "a 2-D conv")[0] if p.dim == 2 else x.channels
    reads = "tokens" if p.dim == 1 else "grid" if x.layout == "tokens" else "image"
    return make(Convolution, reads=reads, in_channels=channels, out=p.out or channels, kernel=list(g.kernel),
                stride=list(g.stride), dilation=list(g.dilation), pads=[list(pad) for pad in g.pads],
                groups=groups_of(p, channels), bias=p.bias, grid=x.grid if reads == "grid" else None,
                **({"weight_norm": p.weight_norm} if p.weight_norm is not None else {}),
                **({"padding_mask": True} if p.padding_mask else {}),
                **({"norm": p.norm, "norm_eps": p.norm_eps} if p.norm != "none" else {}),  # model.py as before
                **({"act": p.act} if p.act is not None else {}))


def conv_grid(p, grid):
    """The token grid after the conv: dim 2 maps (H, W) by the conv formula; a 1-D conv has a
    grid only where it keeps the length, and then keeps it."""
    return geometry(p).out_sizes(grid) if p.dim == 2 else grid  # (H, W) -> (H', W')


register_facts(CONV, grid=conv_grid, classifier=None, resample=None)
