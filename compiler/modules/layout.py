"""The layout family (torch): to_image, to_tokens, resize and upsample (their rules:
archspec/primitives/ops/layout.py), and `OnImage`, the base of the modules that work on an image
and read a token grid as one (pad, pool)."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.base import size_pair
from archspec.primitives.ops.layout import RESIZE, TO_IMAGE, TO_TOKENS, UPSAMPLE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import grid_as_image, image_as_tokens, make


class OnImage(nn.Module):
    """A module whose `image(x)` maps an image [B, C, H, W] -> [B, C, H', W']; with `grid` (the
    (H, W) of a token grid) it reads tokens [B, H*W, C] as that image and gives tokens
    [B, H'*W', C] back."""

    def __init__(self, grid=None):
        super().__init__()
        self.grid = tuple(grid) if grid is not None else None

    def image(self, x):
        raise NotImplementedError

    def forward(self, x):
        if self.grid is not None:
            x = grid_as_image(x, self.grid)  # [B, HW, C] -> [B, C, H, W]
        x = self.image(x)  # [B, C, H, W] -> [B, C, H', W']
        if self.grid is not None:
            x = image_as_tokens(x)  # [B, C, H', W'] -> [B, H'W', C]
        return x


def grid_of(x):
    """`grid` of an OnImage reading `x` (a TensorType): its token grid, or None for an image."""
    return x.grid if x.layout == "tokens" else None


class ToImage(nn.Module):
    def __init__(self, grid):
        super().__init__()
        self.grid = tuple(grid)

    def forward(self, x):
        h, w = self.grid
        return x.transpose(1, 2).reshape(x.shape[0], -1, h, w)  # [B, N, C] -> [B, C, H, W]


class ToTokens(nn.Module):
    def forward(self, x):
        return image_as_tokens(x)  # [B, C, H, W] -> [B, H*W, C]


class Resize(nn.Module):
    """An image interpolated to a fixed `size`, or (size None) to the height and width of a second
    image it is given (`like: true`)."""

    def __init__(self, size: tuple[int, int] | None, mode: str, align_corners: bool, antialias: bool = False):
        super().__init__()
        self.size, self.mode, self.antialias = size, mode, antialias
        self.align_corners = None if mode == "nearest" else align_corners  # torch refuses it for nearest

    def forward(self, x, like=None):
        size = self.size if like is None else like.shape[-2:]
        return F.interpolate(x, size=size, mode=self.mode, align_corners=self.align_corners,
                             antialias=self.antialias)  # [B, C, H, W] -> [B, C, h, w]

    def extra_repr(self) -> str:
        return (f"size={self.size}, mode={self.mode!r}" + (", align_corners=True" if self.align_corners else "")
                + (", antialias=True" if self.antialias else ""))


@lowering(TO_IMAGE)
def lower_to_image(p, inputs, ctx):
    return make(ToImage, grid=inputs[0].grid)


@lowering(TO_TOKENS)
def lower_to_tokens(p, inputs, ctx):
    return make(ToTokens)


@lowering(RESIZE)
def lower_resize(p, inputs, ctx):
    antialias = {"antialias": True} if p.antialias else {}  # model.py as before without it
    return make(Resize, size=size_pair(p.size) if p.size is not None else None, mode=p.mode,
                align_corners=p.align_corners, **antialias)


@lowering(UPSAMPLE)
def lower_upsample(p, inputs, ctx):
    if p.mode == "nearest":
        return make(nn.Upsample, scale_factor=p.factor, mode="nearest")
    return make(nn.Upsample, scale_factor=p.factor, mode="bilinear", align_corners=p.align_corners)


def interpolated_size(op):
    """TOKEN_GRID of an interpolation: the image's new height and width, by its rule's `size` (may
    be torch SymInts while exporting with a dynamic image size)."""
    return lambda p, size: tuple(op.size(p, size[0], size[1]))  # (H, W) -> (h, w)


register_facts(TO_IMAGE, grid=KEEPS, classifier=None, resample=None)
register_facts(TO_TOKENS, grid=KEEPS, classifier=None, resample=None)
register_facts(RESIZE, grid=interpolated_size(RESIZE), classifier=None, resample=None)
register_facts(UPSAMPLE, grid=interpolated_size(UPSAMPLE), classifier=None, resample=None)
