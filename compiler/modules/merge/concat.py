"""merge kind=concat (torch): Swin patch merging (2x2 concat, norm, reduction)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.merge.concat import CONCAT, out_width

from ...facts import register_facts
from ...lowering_rules import lowering
from ..common import Linear, make, trunc_normal_linears


class PatchMerging(nn.Module):
    """Each 2x2 neighbourhood concatenated (x00, x10, x01, x11), normed and reduced (timm)."""

    def __init__(self, dim, out_dim, grid, norm_first=True, norm_eps=1e-5, bias=False):
        super().__init__()
        self.grid, self.norm_first = tuple(grid), norm_first
        self.norm = nn.LayerNorm(4 * dim if norm_first else out_dim, eps=norm_eps)
        self.reduction = Linear(4 * dim, out_dim, bias=bias)
        trunc_normal_linears(self)

    def forward(self, x):
        B, N, C = x.shape
        H, W = self.grid
        x = x.view(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5)  # [B, H/2, W/2, 2(w), 2(h), C]
        x = x.reshape(B, N // 4, 4 * C)  # -> [B, HW/4, 4C]
        if self.norm_first:
            return self.reduction(self.norm(x))  # -> [B, HW/4, out]
        return self.norm(self.reduction(x))


@lowering(CONCAT)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(PatchMerging, dim=x.channels, out_dim=out_width(p, x.channels), grid=x.grid,
                norm_first=p.norm == "before", norm_eps=p.norm_eps, bias=p.bias)


def merged_grid(p, grid):
    """The grid after merging each 2x2 neighbourhood."""
    return grid[0] // 2, grid[1] // 2  # (H, W) -> (H/2, W/2)


register_facts(CONCAT, grid=merged_grid, classifier=None, resample=None)
