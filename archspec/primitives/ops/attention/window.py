"""window: W-MSA, attention inside non-overlapping MxM windows of the token grid, with a
relative position bias (a table: Swin v1; a continuous bias from a small MLP over
log-spaced offsets: Swin v2) and optionally scaled cosine attention (Swin v2).

Where the grid is no larger than the window, the window shrinks to the grid (as timm does).
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field

from ....core.suggestions import Divides, GridOrigin, Remedy
from ....core.types import TensorType, dim_value
from ...base import Cost, NonNegInt, PositiveInt, RuleError
from ...counting import FLOAT_BYTES, INDEX_BYTES, attention_flops, linear_flops, linear_params
from ...grids import divisors, grid_origin, nearest_input, origin_text
from ...registry import register
from .common import AttentionOp, AttentionParams, need_grid


class WindowParams(AttentionParams):
    kind: Literal["window"]
    window: PositiveInt = Field(description="window size M: attention inside MxM windows")
    bias: Literal["table", "cpb", "none"] = Field(
        "table", description="relative position bias: table (Swin v1), cpb (Swin v2 log-spaced MLP) or none")
    cosine: bool = Field(False, description="scaled cosine attention with a learned per-head logit scale (Swin v2)")
    qkv_bias: Union[bool, Literal["qv"]] = Field(True, description="true, false, or qv (query and value only, Swin v2)")
    cpb_hidden: PositiveInt = 512
    pretrained_window: NonNegInt = Field(0, description="cpb: window size the coordinates are normalised by (0: this one)")


def window_misfit(p: WindowParams, grid: tuple[int, int], size: int, x: TensorType | None) -> RuleError:
    """The window does not divide the grid side `size`."""
    candidates = tuple(divisors(size)[1:-1])
    origin = grid_origin(x) if x is not None else GridOrigin()
    return RuleError(f"window {p.window} does not divide the {grid[0]}x{grid[1]} token grid"
                     f"{origin_text(x) if x is not None else ''}", field="window",
                     hint=Divides("window", size, shown=candidates[-6:], candidates=candidates), grid=origin,
                     input=nearest_input(origin, size, p.window))


class WindowAttentionOp(AttentionOp):
    """Attention inside non-overlapping MxM windows of the grid (timm Swin / SwinV2 W-MSA)."""

    kind = "window"
    Params = WindowParams

    def shift(self, p) -> int:
        """The cyclic shift before partitioning (none for plain windows)."""
        return 0

    def geometry(self, p, grid: tuple[int, int], x: TensorType | None = None):
        """Effective (window, shift) per grid dimension, as timm computes them."""
        shift = self.shift(p)
        windows, shifts = [], []
        for size in grid:
            if size <= p.window:  # the window covers the whole grid: no shift (timm)
                windows.append(size)
                shifts.append(0)
                continue
            if size % p.window:
                raise window_misfit(p, grid, size, x)
            windows.append(p.window)
            shifts.append(shift)
        return tuple(windows), tuple(shifts)

    def check(self, p, inputs: list[TensorType]) -> None:
        x = inputs[0]
        if p.bias == "cpb" and p.window == 1 and p.pretrained_window == 0:
            raise RuleError("the continuous position bias needs a window of at least 2", field="window")
        grid = need_grid(x, self.kind)
        if p.window == 1 and max(grid) > 1:
            raise RuleError(f"window 1 over the {grid[0]}x{grid[1]} token grid: each token would attend only to "
                            "itself, and no information would move between tokens", field="window",
                            hint=Remedy("use a window of at least 2 (Swin: 7), or mlp for a per-token layer"),
                            grid=grid_origin(x))
        self.geometry(p, grid, x)

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        x = inputs[0]
        windows, shifts = self.geometry(p, x.grid)
        table = (2 * windows[0] - 1) * (2 * windows[1] - 1)
        params = p.heads if p.cosine else 0
        flops = attention_flops(dim_value(x.length), windows[0] * windows[1], x.channels)
        if p.bias == "table":
            params += table * p.heads
        elif p.bias == "cpb":
            params += linear_params(2, p.cpb_hidden) + p.cpb_hidden * p.heads
            flops += linear_flops(table, 2, p.cpb_hidden) + linear_flops(table, p.cpb_hidden, p.heads)
        return Cost(params, flops, self.buffer_bytes(p, x.grid, windows, shifts))

    @staticmethod
    def buffer_bytes(p, grid: tuple[int, int], windows: tuple[int, int], shifts: tuple[int, int]) -> int:
        """The window order and its inverse (int64 per token; on the high side: an order that
        changes nothing is not kept), a shifted grid's mask (float32, a window's tokens per
        token) and the relative position index (int64, a window's tokens squared)."""
        tokens, area = grid[0] * grid[1], windows[0] * windows[1]
        mask = FLOAT_BYTES * tokens * area if any(shifts) else 0
        index = INDEX_BYTES * area * area if p.bias != "none" else 0
        return 2 * INDEX_BYTES * tokens + mask + index


WINDOW = register(WindowAttentionOp())
