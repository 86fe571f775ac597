"""window: W-MSA, attention inside non-overlapping MxM windows of the token grid, with a
relative position bias (a table: Swin v1; a continuous bias from a small MLP over
log-spaced offsets: Swin v2) and optionally scaled cosine attention (Swin v2).

Where the grid is no larger than the window, the window shrinks to the grid (as timm's Swin
does). With `pad: true` the window keeps its size and the grid is padded with zero tokens at
the bottom and the right to a multiple of it, as SAM / ViTDet do: the padding is made after the
sub-layer's norm, padded tokens are attended to (no key mask) and cropped off after.

`scores:` takes score parts that add a bias (scores/), over the window: their grid is the
window, their queries and keys the window's tokens, their cost counted once per window.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from ....core.declared import Field, field_validator
from ....core.suggestions import Divides, GridOrigin, Remedy, Setting
from ....core.types import TensorType, dim_value
from ...base import Cost, NonNegInt, PositiveInt, RuleError
from ...counting import FLOAT_BYTES, INDEX_BYTES, attention_flops, linear_flops, linear_params
from ...grids import divisors, grid_origin, nearest_input, origin_text
from ...registry import register
from .common import AttentionOp, AttentionParams, MergeHeads, merge_heads_field, need_grid
from .scores.base import ScoreSite, check_bias_parts, parse_scores
from ...decoding import Mixes, register_decoding


class WindowParams(AttentionParams):
    kind: Literal["window"]
    window: PositiveInt = Field(description="window size M: attention inside MxM windows")
    bias: Literal["table", "cpb", "none"] = Field(
        "table", description="relative position bias: table (Swin v1), cpb (Swin v2 log-spaced MLP) or none")
    cosine: bool = Field(False, description="scaled cosine attention with a learned per-head logit scale (Swin v2)")
    qkv_bias: Union[bool, Literal["qv"]] = Field(True, description="true, false, or qv (query and value only, Swin v2)")
    cpb_hidden: PositiveInt = 512
    pretrained_window: NonNegInt = Field(0, description="cpb: window size the coordinates are normalised by (0: this one)")
    pad: Union[bool, Literal["before_norm"]] = Field(
        False, description="pad the grid with zero tokens to a multiple of the window and crop after; the window never "
                           "shrinks. true: after the sub-layer's norm (SAM / ViTDet); before_norm: before it, the "
                           "padded tokens normed too (TinyViT, whose norm sits inside its attention)")
    scores: list[Any] = Field(default_factory=list,
                              description="score parts that add a bias, over each window (decomposed)")
    queries: Literal["tokens", "external"] = Field(
        "tokens", description="tokens: projected from the tokens; external: read as the input after the tokens, "
                              "one window's queries [B, M*M, C] shared by every window and taken as they are, "
                              "not normed or projected (GC ViT's global query); the projection then makes keys "
                              "and values only")
    merge_heads: MergeHeads = merge_heads_field()
    small_grid: Literal["per_axis", "whole", "rows", "keep"] = Field(
        "per_axis", description="where a side of the grid is no larger than the window: per_axis (timm's Swin), that "
                                "axis's window is the side and unshifted, the other axis as ever; whole (Hugging "
                                "Face's Swin and DonutSwin), the window is the shorter side on both axes and nothing "
                                "is shifted; rows (Hugging Face's Swinv2 and Swin2SR), the rows decide for both axes: "
                                "the window is min(rows, window), shifted unless the rows are no more than it; keep, "
                                "the window and shift as given on any grid (Hugging Face's Swinv2 and Swin2SR decide "
                                "from their config's image_size: keep for an input smaller than it). per_axis, whole "
                                "and rows differ on grids that are not square")
    score_bias: bool = Field(False, description="read an additive score bias [B or 1, heads or 1, M*M, M*M] as the "
                                               "input after the tokens (and the external queries): one window's "
                                               "scores, added in every window")

    @field_validator("bias", mode="before")
    @classmethod
    def _bias_is_the_position_bias(cls, value):
        if isinstance(value, bool):
            raise ValueError("is the window's relative position bias, 'table', 'cpb' or 'none' (an additive "
                             "score-bias input is `score_bias: true`)")
        return value


PAD_INSTEAD = "to pad the grid to a multiple of {window} (as SAM and Twins do)"


def window_misfit(p: WindowParams, grid: tuple[int, int], size: int, x: TensorType | None) -> RuleError:
    """The window does not divide the grid side `size`."""
    candidates = tuple(divisors(size)[1:-1])
    origin = grid_origin(x) if x is not None else GridOrigin()
    padding = Setting("pad", True, PAD_INSTEAD.format(window=p.window)) if p.kind == "window" else None  # unshifted
    return RuleError(f"window {p.window} does not divide the {grid[0]}x{grid[1]} token grid"
                     f"{origin_text(x) if x is not None else ''}", field="window",
                     hint=Divides("window", size, shown=candidates[-6:], candidates=candidates, otherwise=padding),
                     grid=origin,
                     input=nearest_input(origin, size, p.window))


def padded_grid(p: WindowParams, grid: tuple[int, int]) -> tuple[int, int]:
    """The grid the windows tile: with `pad`, each side rounded up to a multiple of the window."""
    if not p.pad:
        return tuple(grid)
    return tuple(-(-size // p.window) * p.window for size in grid)


class WindowAttentionOp(AttentionOp):
    """Attention inside non-overlapping MxM windows of the grid (timm Swin / SwinV2 W-MSA; SAM's
    padded windows with `pad: true`)."""

    kind = "window"
    Params = WindowParams

    def one_grid(self, p) -> str | None:
        return "window attention's token order"

    def reads(self, p) -> tuple[str, ...]:
        return ("x",) + (("queries",) if p.queries == "external" else ()) + (("bias",) if p.score_bias else ())

    def shift(self, p) -> int:
        """The cyclic shift before partitioning (none for plain windows)."""
        return 0

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = super().shape(p, inputs, ctx)
        if p.window == 1 and max(x.grid) > 1:  # legal (MobileViT's last stage at a small image), rarely meant
            ctx.warn(f"window 1 over the {x.grid[0]}x{x.grid[1]} token grid: each token attends only to itself, "
                     "and no information moves between tokens", field="window",
                     hint="a window of at least 2 (Swin: 7) mixes tokens; mlp is the per-token layer")
        if "small_grid" not in p.model_fields_set and self.rules_differ(p, x.grid):
            (h, w), ((wh, ww), (sh, sw)) = x.grid, self.geometry(p, x.grid)
            ctx.warn(f"the {h}x{w} grid has a side no larger than the window {p.window}, where timm's Swin and "
                     "Hugging Face's window it differently: this layer follows timm's (small_grid: per_axis: "
                     f"{wh}x{ww} windows shifted by {sh}x{sw}), Hugging Face's Swin and DonutSwin shift nothing and "
                     "window the shorter side on both axes (small_grid: whole), its Swinv2 and Swin2SR let the rows "
                     "decide for both axes (small_grid: rows)", field="window",
                     hint="write small_grid: per_axis (timm), whole (Hugging Face's Swin) or rows (its Swinv2) to say "
                          "which")
        return x

    def rules_differ(self, p, grid: tuple[int, int]) -> bool:
        """Whether timm's per-axis clamp and Hugging Face's rules (Swin's whole grid, Swinv2's rows)
        give this grid other windows or shifts (a grid that is not square, a side no larger than the
        window)."""
        if p.pad or grid[0] == grid[1] or min(grid) > p.window:
            return False
        found = set()
        for rule in ("per_axis", "whole", "rows"):
            try:
                found.add(self.geometry(p.model_copy(update={"small_grid": rule}), grid))
            except RuleError:  # this rule cannot window this grid: the check says so where it is asked
                continue
        return len(found) > 1

    def geometry(self, p, grid: tuple[int, int], x: TensorType | None = None):
        """Effective (window, shift) per grid dimension: timm's per-axis clamp, or with `small_grid:
        whole` Hugging Face's (the shorter side on both axes, unshifted, where it is no larger)."""
        if p.pad:  # SAM: the window keeps its size, the grid is padded to it
            return (p.window, p.window), (0, 0)
        shift = self.shift(p)
        if p.small_grid in ("rows", "keep"):  # Hugging Face's Swinv2Layer: its input_resolution's rows decide
            window = min(grid[0], p.window) if p.small_grid == "rows" else p.window
            for size in grid:
                if size % window:
                    raise window_misfit(p, grid, size, x)
            moved = shift if p.small_grid == "keep" or grid[0] > window else 0
            return (window, window), (moved, moved)
        if p.small_grid == "whole" and min(grid) <= p.window:  # Hugging Face's set_shift_and_window_size
            side = min(grid)
            if max(grid) % side:  # Hugging Face pads the grid then: not written here
                raise RuleError(f"with small_grid: whole the window is the grid's shorter side, {side}, and it does "
                                f"not divide the {grid[0]}x{grid[1]} token grid", field="small_grid",
                                hint=Remedy("an image whose grid sides are multiples of each other, or per_axis "
                                            "(timm's rule)"))
            return (side, side), (0, 0)
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

    def score_site(self, p, inputs: list[TensorType]) -> ScoreSite:
        """The score parts work on one window: its grid, its tokens as queries and keys."""
        x = inputs[0]
        windows, _ = self.geometry(p, x.grid)
        area = windows[0] * windows[1]
        return ScoreSite(p.heads, x.channels // p.heads, area, area, windows, x)

    def check(self, p, inputs: list[TensorType]) -> None:
        x = inputs[0]
        if p.bias == "cpb" and p.window == 1 and p.pretrained_window == 0:
            raise RuleError("the continuous position bias needs a window of at least 2", field="window")
        grid = need_grid(x, self.kind)
        if p.pad and self.shift(p):
            raise RuleError(f"pad goes with unshifted windows: a {self.kind} window's cyclic shift would move the "
                            "padding into the grid", field="pad",
                            hint=Remedy("use kind: window with pad: true (SAM), or a window that divides the grid"))
        if p.pad and p.small_grid == "whole":
            raise RuleError("pad keeps the window's size over any grid, and small_grid: whole shrinks it to a short "
                            "grid's side: give one", field="small_grid")
        self.geometry(p, grid, x)
        if p.pad == "before_norm" and p.norm != "pre":
            raise RuleError(f"pad: before_norm pads the tokens before the sub-layer's norm, and norm: {p.norm} has "
                            "no norm before the attention", field="pad",
                            hint=Remedy("use norm: pre (TinyViT), or pad: true"))
        if p.queries == "external":
            self.check_external_queries(p, x, inputs[1])
        if p.score_bias:
            self.check_score_bias(p, x, inputs[-1])
        self.check_scores(p, inputs)

    def check_external_queries(self, p, x: TensorType, queries: TensorType) -> None:
        """External queries are one window's worth of tokens of the stream's width, shared by its
        (unshifted) windows, and there is no query projection for a `qv` bias."""
        windows, _ = self.geometry(p, x.grid)
        area = windows[0] * windows[1]
        want = f"[{x.shape[0]}, {area}, {x.channels}]"
        if queries.layout != "tokens" or queries.shape[0] != x.shape[0] or queries.length != area \
                or queries.channels != x.channels:
            raise RuleError(f"external queries must be one {windows[0]}x{windows[1]} window's tokens {want}, got "
                            f"{queries.layout_name()} {queries.describe()}", field="from",
                            hint=Remedy("feed a node that gives one query per place of a window at the stream's "
                                        "width (GC ViT: the global query, pooled to the window size)"))
        if self.shift(p):
            raise RuleError("external queries go with unshifted windows: each window reads the same queries",
                            field="queries", hint=Remedy("use kind: window"))
        if p.qkv_bias == "qv":
            raise RuleError("qkv_bias: qv gives the query projection a bias, and external queries have no "
                            "projection", field="qkv_bias", hint=Remedy("use qkv_bias: true or false"))

    def check_score_bias(self, p, x: TensorType, bias: TensorType) -> None:
        """A score bias is [B or 1, heads or 1, A, A] over one window's A tokens."""
        windows, _ = self.geometry(p, x.grid)
        area = windows[0] * windows[1]
        want = f"[B or 1, {p.heads} or 1, {area}, {area}]"
        if bias.dtype != "float32" or len(bias.shape) != 4 or bias.shape[0] not in (1, x.shape[0]) \
                or bias.shape[1] not in (1, p.heads) or tuple(bias.shape[2:]) != (area, area):
            raise RuleError(f"the score bias must be a float tensor {want} (one {windows[0]}x{windows[1]} window's "
                            f"scores, added in every window), got {bias.describe()}", field="from",
                            hint=Remedy("feed a param of shape [heads, M*M, M*M] or a node of the shape above"))

    def check_scores(self, p, inputs: list[TensorType]) -> None:
        """Each part fits the window; parts that write the scores out are not taken here."""
        check_bias_parts(p.scores, self.score_site(p, inputs), self.kind,
                         "use a bias part (decomposed) here, or the part on global attention")

    def windows(self, p, grid: tuple[int, int]) -> int:
        """How many windows tile the (padded) grid."""
        windows, _ = self.geometry(p, grid)
        rows, cols = padded_grid(p, grid)
        return (rows // windows[0]) * (cols // windows[1])

    def score_bytes(self, p, inputs: list[TensorType]) -> int:
        """One window's scores (heads x its tokens squared) for every window of the padded grid,
        computed together (the windows go through attention as one batch)."""
        grid = inputs[0].grid
        windows, _ = self.geometry(p, grid)
        area = windows[0] * windows[1]
        return FLOAT_BYTES * p.heads * self.windows(p, grid) * area * area

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        """The projections also run over the padding tokens (qkv before the attention, the output
        projection before the crop)."""
        x = inputs[0]
        base = super().cost(p, inputs, out, ctx)
        rows, cols = padded_grid(p, x.grid)
        extra = rows * cols - dim_value(x.length)
        flops = linear_flops(extra, x.channels, 3 * x.channels) + linear_flops(extra, x.channels, x.channels)
        params = base.params
        if p.queries == "external":  # no query projection: keys and values only
            params -= linear_params(x.channels, x.channels, p.qkv_bias is True)
            flops -= linear_flops(rows * cols, x.channels, x.channels)
        return Cost(params, base.flops + flops, base.buffer_bytes, base.score_bytes)

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        x = inputs[0]
        windows, shifts = self.geometry(p, x.grid)
        rows, cols = padded_grid(p, x.grid)
        table = (2 * windows[0] - 1) * (2 * windows[1] - 1)
        params = p.heads if p.cosine else 0
        flops = attention_flops(rows * cols, windows[0] * windows[1], x.channels)
        if p.bias == "table":
            params += table * p.heads
        elif p.bias == "cpb":
            params += linear_params(2, p.cpb_hidden) + p.cpb_hidden * p.heads
            flops += linear_flops(table, 2, p.cpb_hidden) + linear_flops(table, p.cpb_hidden, p.heads)
        buffers = self.buffer_bytes(p, x.grid, windows, shifts)
        site, count = self.score_site(p, inputs), self.windows(p, x.grid)
        for use in parse_scores(p.scores):
            part = use.part.cost(use.params, site)
            params, flops, buffers = params + part.params, flops + count * part.flops, buffers + part.buffer_bytes
        return Cost(params, flops, buffers)

    @staticmethod
    def buffer_bytes(p, grid: tuple[int, int], windows: tuple[int, int], shifts: tuple[int, int]) -> int:
        """The window order (int64 per place of the padded grid) and its inverse (per token; on
        the high side: an order that changes nothing is not kept), a shifted grid's mask (float32,
        a window's tokens per token) and the relative position index (int64, a window's tokens
        squared)."""
        tokens, area = grid[0] * grid[1], windows[0] * windows[1]
        rows, cols = padded_grid(p, grid)
        mask = FLOAT_BYTES * tokens * area if any(shifts) else 0
        index = INDEX_BYTES * area * area if p.bias != "none" else 0
        return INDEX_BYTES * (rows * cols + tokens) + mask + index


WINDOW = register(WindowAttentionOp())
register_decoding(WINDOW, Mixes("it lets a token see later tokens (only causal, sliding and alibi attention are cached)"))
