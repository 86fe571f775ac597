"""fold (torch): F.fold, columns of sliding blocks summed back into an image. Written as one
shifted add per kernel position (pads and reshapes), not col2im: torch-tensorrt has no
converter for col2im's index_put with a dynamic batch, and this converts everywhere."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.base import size_pair
from archspec.primitives.ops.fold import FOLD
from archspec.primitives.ops.unfold import blocks, geometry

from ..facts import register_facts
from ..lowering_rules import lowering
from .common import make


class Fold(nn.Module):
    """F.fold(x, size, kernel, dilation, padding, stride): [B, C*kh*kw, Lh*Lw] -> [B, C, H, W],
    each block's kh*kw columns added at its place, summing where blocks overlap."""

    def __init__(self, size, kernel, stride, padding, dilation, blocks):
        super().__init__()
        self.size, self.kernel, self.stride = tuple(size), tuple(kernel), tuple(stride)
        self.padding, self.dilation, self.blocks = tuple(padding), tuple(dilation), tuple(blocks)

    def forward(self, x):
        (h, w), (kh, kw), (sh, sw) = self.size, self.kernel, self.stride
        (ph, pw), (dh, dw), (lh, lw) = self.padding, self.dilation, self.blocks
        b = x.shape[0]
        cols = x.reshape(b, -1, kh, kw, lh, 1, lw, 1)  # [B, C*kh*kw, L] -> [B, C, kh, kw, Lh, 1, Lw, 1]
        if sh > 1 or sw > 1:  # the blocks' places: zeros between them
            cols = F.pad(cols, (0, sw - 1, 0, 0, 0, sh - 1))  # [B, C, kh, kw, Lh, sh, Lw, sw]
        cols = cols.reshape(b, -1, kh, kw, lh * sh, lw * sw)  # [B, C, kh, kw, Lh*sh, Lw*sw]
        cols = cols[..., : (lh - 1) * sh + 1, : (lw - 1) * sw + 1]  # no zeros after the last block
        tall, wide = h + 2 * ph, w + 2 * pw
        span_h, span_w = (lh - 1) * sh + 1, (lw - 1) * sw + 1
        out = None
        for i in range(kh):
            for j in range(kw):
                top, left = i * dh, j * dw
                piece = F.pad(cols[:, :, i, j], (left, wide - left - span_w, top, tall - top - span_h))  # [B, C, H+2ph, W+2pw]
                out = piece if out is None else out + piece
        return out[:, :, ph: ph + h, pw: pw + w]  # [B, C, H, W]

    def extra_repr(self) -> str:
        return (f"size={self.size}, kernel={self.kernel}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}")


@lowering(FOLD)
def lower(p, inputs, ctx):
    kernel, stride, padding, dilation = geometry(p)
    size = size_pair(p.size)
    return make(Fold, size=size, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                blocks=blocks(p, size, "fold"))


def folded_size(p, size):
    """TOKEN_GRID: the image's height and width are `size`, whatever the input."""
    return size_pair(p.size)  # -> (H, W)


register_facts(FOLD, grid=folded_size, classifier=None, resample=None)
