"""Weights made for another input size or window, resampled to the model's, as timm's
checkpoint filters do when pretrained weights meet a model of another size:

- learned position embeddings [1, prefix + h*w, C] (patchify's `pos_embed`): the grid part
  resampled bicubically (antialiased, in float32) to the model's grid, the prefix (class)
  tokens kept aside and put back in front (timm's resample_abs_pos_embed); a map [1, h, w, C]
  (timm's SAM, NHWC) is flattened first (and only flattened where h x w is the model's grid);
- relative-position bias tables [(2w-1)^2, heads] (Swin v1's `position_bias.table`): each
  head's table resampled to the new window by linear interpolation on BEiT's uneven grid,
  whose spacing grows geometrically away from the centre so that the nearest offsets keep
  their values (timm's resize_rel_pos_bias_table without scipy).

`resamplers(model)` gives, per state-dict key of the model that can be resampled, the function
that brings a tensor of another size to the model's; loading uses it for tensors whose shape
differs from the model's, and says which it resampled. Which weights of a node resample, and how,
is its op's RESAMPLE fact (compiler/facts.py), registered from the op's torch file
(`positions_of` for patchify, `bias_table_of` for window attention): no attribute is sniffed.
"""

from __future__ import annotations

import math
from itertools import product
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

Resampler = Callable[[torch.Tensor], torch.Tensor]


def resamplers(model: nn.Module) -> dict[str, Resampler]:
    """Per state-dict key, its resampler: each node's op's RESAMPLE fact asked of the node's module
    (none for a model archspec did not build)."""
    from archspec.primitives import registry

    from ..facts import RESAMPLE

    facts = getattr(model, "meta", {}).get("archspec")  # a ModelFacts (compiler/interface.py)
    found: dict[str, Resampler] = {}
    for path, primitive, kind in getattr(facts, "ops", ()):
        rule = RESAMPLE.of(registry.op(primitive, kind))
        if rule is not None:
            found.update({f"{path}.{key}": resampler for key, resampler in rule(model.get_submodule(path)).items()})
    return found


def positions_of(grid: tuple[int, int], prefix: int) -> Resampler:
    """The resampler of a learned position table [1, prefix + h*w, C] for the model's grid."""
    return lambda table: resample_positions(table, grid, prefix)


def bias_table_of(window: tuple[int, int]) -> Resampler:
    """The resampler of a relative-position bias table [(2w-1)^2, heads] for the model's window."""
    return lambda table: resample_bias_table(table, window)


def resample_positions(table: torch.Tensor, grid: tuple[int, int], prefix: int) -> torch.Tensor:
    """[1, prefix + h*w, C] (a square h x w grid) -> [1, prefix + H*W, C] for grid (H, W). A map
    [1, h, w, C] (timm's SAM keeps its positions so, NHWC, without prefix tokens) is read as its
    rows flattened; at the model's grid it is only flattened."""
    if table.dim() == 4 and table.shape[0] == 1 and not prefix:
        if tuple(table.shape[1:3]) == tuple(grid):
            return table.reshape(1, -1, table.shape[-1])  # [1, H, W, C] -> [1, H*W, C]
        if table.shape[1] != table.shape[2]:
            raise ValueError(f"a position map of {table.shape[1]}x{table.shape[2]} is not a square grid")
        table = table.reshape(1, -1, table.shape[-1])  # [1, h, w, C] -> [1, h*w, C]
    if table.dim() != 3 or table.shape[0] != 1:
        raise ValueError(f"a position table is [1, N, C], got {tuple(table.shape)}")
    tokens, grid_part = table[:, :prefix], table[:, prefix:]
    side = math.isqrt(grid_part.shape[1])
    if side * side != grid_part.shape[1]:
        raise ValueError(f"{grid_part.shape[1]} positions are not a square grid")
    width, dtype = grid_part.shape[-1], grid_part.dtype
    image = grid_part.float().reshape(1, side, side, width).permute(0, 3, 1, 2)  # [1, C, h, w]
    image = F.interpolate(image, size=grid, mode="bicubic", antialias=True)  # -> [1, C, H, W]
    grid_part = image.permute(0, 2, 3, 1).reshape(1, -1, width).to(dtype)  # -> [1, H*W, C]
    return torch.cat([tokens, grid_part], dim=1)


def _uneven_offsets(source: int, target: int) -> list[float]:
    """BEiT's source offsets: 0, then distances growing by a ratio q found by bisection so that
    the source's half (source // 2 steps) spans the target's half (target // 2)."""
    low, high = 1.01, 1.5
    while high - low > 1e-6:
        q = (low + high) / 2.0
        span = (1.0 - q ** (source // 2)) / (1.0 - q)  # geometric series 1 + q + ... + q^(n-1)
        if span > target // 2:
            high = q
        else:
            low = q
    distances, position = [], 1.0
    for i in range(source // 2):
        distances.append(position)
        position += q ** (i + 1)
    return [-d for d in reversed(distances)] + [0.0] + distances


def _interpolate_linear(axes: tuple[torch.Tensor, torch.Tensor], values: torch.Tensor,
                        at: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Bilinear interpolation of `values` given on the (uneven) grid `axes`, at points `at`."""
    corners, weights, spans = [], [], []
    for axis, x in zip(axes, at):
        right = torch.bucketize(x, axis).clamp(max=axis.shape[0] - 1)
        left = (right - 1).clamp(0, axis.shape[0] - 1)
        to_left, to_right = (x - axis[left]).clamp(min=0), (axis[right] - x).clamp(min=0)
        on_point = (to_left == 0) & (to_right == 0)
        to_left[on_point] = to_right[on_point] = 1.0
        corners.append((left, right))
        weights.append((to_left, to_right))
        spans.append(to_left + to_right)
    total = 0.0
    for choice in product((0, 1), repeat=2):  # the four neighbours, each weighted by the opposite distances
        index = [corner[c] for c, corner in zip(choice, corners)]
        weight = torch.stack([w[1 - c] for c, w in zip(choice, weights)]).prod(dim=0)
        total = total + values[tuple(index)] * weight
    return total / torch.stack(spans).prod(dim=0)


def resample_bias_table(table: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """[(2w-1)^2, heads] for a square window w -> [(2W-1)*(2V-1), heads] for window (W, V)."""
    if table.dim() != 2:
        raise ValueError(f"a relative-position bias table is [(2w-1)^2, heads], got {tuple(table.shape)}")
    side = math.isqrt(table.shape[0])
    if side * side != table.shape[0]:
        raise ValueError(f"{table.shape[0]} offsets are not a square window's table")
    target = (2 * window[0] - 1, 2 * window[1] - 1)
    if (side, side) == target:
        return table
    axes = (torch.tensor(_uneven_offsets(side, target[0])), torch.tensor(_uneven_offsets(side, target[1])))
    half_h, half_w = target[0] // 2.0, target[1] // 2.0
    ys, xs = torch.meshgrid(torch.arange(-half_h, half_h + 0.1, 1.0), torch.arange(-half_w, half_w + 0.1, 1.0),
                            indexing="ij")
    heads = [_interpolate_linear(axes, table[:, h].view(side, side).float(), (ys, xs)).reshape(-1, 1)
             for h in range(table.shape[1])]
    return torch.cat(heads, dim=-1).to(table.dtype)  # [(2W-1)(2V-1), heads]
