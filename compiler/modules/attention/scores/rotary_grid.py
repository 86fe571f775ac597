"""score part rotary_grid (torch): 2-D axial rotary positions over the token grid, applied to the
queries and keys before the scores (timm's `RotaryEmbeddingCat` tables and `apply_rot_embed_cat`,
as `EvaAttention` / `AttentionRope` use them), so the attention stays one fused SDPA. The table
is timm's `pos_embed` layout, [H*W, 2 * dims] = sin | cos, built once (a buffer, not saved: timm's
is not persistent either); the prefix tokens are left unrotated."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.rotary_grid import ROTARY_GRID, rotated_dims

from ...common import make
from .base import score_module


def axis_positions(size, ref, positions="cells"):
    """The positions along one axis [size], float32: the cells 0..size-1, rescaled to a reference
    size when given (timm's `_build_grid`: index / size * ref); or the patches' centres on
    [-1, 1], times 2 pi (DINOv3's get_patches_center_coordinates and its 2 pi, as it computes them)."""
    if positions == "centres":
        centres = torch.arange(0.5, size, dtype=torch.float32) / size  # [size] on (0, 1)
        return 2 * math.pi * (2.0 * centres - 1.0)  # [size] on (-2 pi, 2 pi)
    t = torch.arange(size, dtype=torch.int64).to(torch.float32)  # [size]
    return t if ref is None else t / size * ref


def axis_frequencies(dims, theta, frequencies="per_axis"):
    """The frequencies [2, dims/4] of the first axis and of the second: each theta^(-i / (dims/4))
    (per_axis, timm's), or one 1-D rotary's theta^(-2j / dims) split even, odd (alternating, Pixtral's)."""
    if frequencies == "alternating":
        full = 1.0 / (theta ** (torch.arange(0, dims, 2, dtype=torch.int64).to(torch.float32) / dims))  # [dims/2]
        return torch.stack((full[::2], full[1::2]))  # [2, dims/4]
    bands = dims // 4
    freqs = 1.0 / (theta ** (torch.arange(0, bands, dtype=torch.int64).to(torch.float32) / bands))  # [dims/4]
    return torch.stack((freqs, freqs))  # [2, dims/4]


def grid_table(grid, dims, theta, interleaved, indexing, ref_grid=None, frequencies="per_axis", positions="cells"):
    """sin | cos of every cell's angles, [H*W, 2 * dims], cells row-major: dims/4 frequencies per
    axis (axis_frequencies); the first axis (row for ij, column for xy) fills the first half of
    the angles, each angle twice (interleaved: side by side; else: the halves repeated)."""
    h, w = grid
    ref_h, ref_w = ref_grid if ref_grid is not None else (None, None)
    bands = dims // 4
    freqs = axis_frequencies(dims, theta, frequencies)  # [2, dims/4]
    rows, cols = torch.meshgrid(axis_positions(h, ref_h, positions), axis_positions(w, ref_w, positions),
                                indexing="ij")  # 2 x [H, W]
    axes = (rows, cols) if indexing == "ij" else (cols, rows)
    cells = torch.stack(axes, dim=-1).reshape(h * w, 2)  # [H*W, 2]
    angles = (cells[:, :, None] * freqs).reshape(h * w, 2 * bands)  # [H*W, 2, dims/4] -> [H*W, dims/2]
    sin, cos = angles.sin(), angles.cos()  # 2 x [H*W, dims/2]
    if interleaved:
        sin, cos = sin.repeat_interleave(2, -1), cos.repeat_interleave(2, -1)  # 2 x [H*W, dims]
    else:
        sin, cos = torch.cat((sin, sin), -1), torch.cat((cos, cos), -1)  # 2 x [H*W, dims]
    return torch.cat((sin, cos), -1)  # [H*W, 2*dims]


def turn_pairs(x):
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...): each pair (2i, 2i+1) turned a quarter."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)  # [..., d/2, 2] -> [..., d]


def turn_halves(x):
    """(x_a, x_b) -> (-x_b, x_a): dim i paired with i + d/2."""
    a, b = x.chunk(2, dim=-1)  # 2 x [..., d/2]
    return torch.cat((-b, a), dim=-1)  # [..., d]


class RotaryGrid(nn.Module):
    """Rotates the grid tokens' first `dims` dims of each head by their cell, after `prefix`
    tokens that stay as they are."""

    def __init__(self, grid, dims, prefix=0, theta=10000.0, interleaved=True, indexing="ij", ref_grid=None,
                 frequencies="per_axis", positions="cells", prefix_angles=False):
        super().__init__()
        self.dims, self.prefix, self.interleaved = dims, prefix, interleaved
        self.reads_tensors = prefix_angles  # rotate(q, k, tensors): the prefix tokens' angles [1, P, dims/2]
        table = grid_table(grid, dims, theta, interleaved, indexing, ref_grid, frequencies, positions)
        self.register_buffer("pos_embed", table, persistent=False)

    def rotate(self, q, k, tensors=()):
        """q [B, h, P + H*W, d] and k [B, h_kv, P + H*W, d] -> the same, rotated; `tensors` (with
        prefix_angles): the prefix tokens' angles [1, P, dims/2], which turn them too."""
        table = self.pos_embed  # [H*W, 2*dims] = sin | cos
        if self.reads_tensors:
            table = torch.cat((self.angles_table(tensors[0][0]), table), dim=0)  # [P + H*W, 2*dims]
        return self.turn(q, table), self.turn(k, table)

    def angles_table(self, angles):
        """sin | cos [P, 2*dims] of the prefix's angles [P, dims/2], each twice as a cell's are."""
        angles = angles.float()
        twice = angles.repeat_interleave(2, -1) if self.interleaved else torch.cat((angles, angles), -1)  # [P, dims]
        return torch.cat((twice.sin(), twice.cos()), -1)  # [P, 2*dims]

    def turn(self, x, table):
        sin, cos = table.chunk(2, dim=-1)  # 2 x [rows, dims]: every token's (with prefix angles) or the cells'
        start = 0 if table.shape[0] == x.shape[2] else self.prefix
        cells = x[:, :, start:]  # [B, h, rows, d]
        moving, kept = cells[..., : self.dims], cells[..., self.dims:]  # [B, h, rows, dims], [.., d - dims]
        quarter = turn_pairs(moving) if self.interleaved else turn_halves(moving)
        moved = (moving * cos + quarter * sin).to(x.dtype)  # [B, h, rows, dims]
        cells = torch.cat((moved, kept), dim=-1) if kept.shape[-1] else moved  # [B, h, rows, d]
        return torch.cat((x[:, :, :start], cells), dim=2) if start else cells  # [B, h, P + H*W, d]


@score_module(ROTARY_GRID)
def make_rotary_grid(p, site):
    return make(RotaryGrid, grid=tuple(site.grid), dims=rotated_dims(p, site), prefix=site.x.prefix,
                theta=p.theta, interleaved=p.interleaved, indexing=p.indexing,
                ref_grid=tuple(p.ref_grid) if p.ref_grid is not None else None,
                **({"frequencies": p.frequencies} if p.frequencies != "per_axis" else {}),  # model.py as before
                **({"positions": p.positions} if p.positions != "cells" else {}),
                **({"prefix_angles": True} if p.prefix_angles is not None else {}))
