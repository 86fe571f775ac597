"""attention: the multi-head attention sub-layer, one parameter model and rule per kind.

global      all tokens attend to all tokens                          timm ViT
window      W-MSA inside non-overlapping MxM windows of the grid      timm Swin / SwinV2
shifted     SW-MSA: windows after a cyclic shift, with the shift mask timm Swin / SwinV2
sra         keys/values from the grid reduced by a conv (k = s = R)   PVT v1, PVT v2
linear_sra  keys/values from a PxP average pool + 1x1 conv + GELU     PVT v2 linear
causal      each token attends to itself and earlier tokens           nn.Transformer decoder, CLIP text
cross       queries from this stream, keys/values from `memory`       nn.Transformer decoder

Window attention follows timm where the grid is no larger than the window: the window
shrinks to the grid and the shift becomes 0.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from ..registry import (Cost, Eps, NonNegInt, PositiveInt, Primitive, Rate, RuleError, Sublayer, attention_flops,
                        divisors, linear_flops, linear_params, norm_params, plural, register, suggest_input,
                        trace_text)
from ..types import Sym, TensorType, dim_value


class AttentionBase(Sublayer):
    heads: PositiveInt = Field(description="number of attention heads; must divide the width")
    qkv_bias: bool = True
    proj_bias: bool = True
    attn_drop: Rate = 0.0
    proj_drop: Rate = 0.0


class GlobalAttention(AttentionBase):
    kind: Literal["global"]


class CausalAttention(AttentionBase):
    kind: Literal["causal"]


class CrossAttention(AttentionBase):
    kind: Literal["cross"]


class WindowAttention(AttentionBase):
    kind: Literal["window"]
    window: PositiveInt = Field(description="window size M: attention inside MxM windows")
    bias: Literal["table", "cpb", "none"] = Field(
        "table", description="relative position bias: table (Swin v1), cpb (Swin v2 log-spaced MLP) or none")
    cosine: bool = Field(False, description="scaled cosine attention with a learned per-head logit scale (Swin v2)")
    qkv_bias: Union[bool, Literal["qv"]] = Field(True, description="true, false, or qv (query and value only, Swin v2)")
    cpb_hidden: PositiveInt = 512
    pretrained_window: NonNegInt = Field(0, description="cpb: window size the coordinates are normalised by (0: this one)")


class ShiftedAttention(WindowAttention):
    kind: Literal["shifted"]
    shift: PositiveInt | None = Field(None, description="cyclic shift; default window // 2")


class SraAttention(AttentionBase):
    kind: Literal["sra"]
    sr_ratio: PositiveInt = Field(1, description="keys/values from the grid reduced by conv(k = s = sr_ratio)")
    sr_eps: Eps = Field(1e-5, description="epsilon of the LayerNorm after the reduction")


class LinearSraAttention(AttentionBase):
    kind: Literal["linear_sra"]
    pool: PositiveInt = Field(7, description="keys/values from an adaptive average pool to pool x pool")
    sr_eps: Eps = 1e-5


AttentionParams = Annotated[
    Union[GlobalAttention, WindowAttention, ShiftedAttention, SraAttention, LinearSraAttention, CausalAttention,
          CrossAttention],
    Field(discriminator="kind"),
]


# -- rules -------------------------------------------------------------------------------------


def check_heads(p: AttentionBase, width: int) -> None:
    if width % p.heads:
        fits = [d for d in divisors(width) if d <= 64][-8:]
        raise RuleError(f"{p.heads} heads do not divide the width {width}", field="heads",
                        hint=f"use a number of heads that divides {width} ({', '.join(map(str, fits))})")


def need_grid(x: TensorType, kind: str) -> tuple[int, int]:
    if x.layout != "tokens" or x.grid is None:
        hint = ("patchify the image first" if x.layout == "image"
                else "patchify an image, or declare the input's `grid: [H, W]`")
        raise RuleError(f"{kind} attention needs a token grid, got {x.layout_name()}", field="kind", hint=hint)
    if x.prefix:
        raise RuleError(f"{kind} attention cannot run over class tokens; these tokens have "
                        f"{plural(x.prefix, 'class token')}", field="kind",
                        hint="use global attention, or patchify without cls_token")
    return x.grid


def window_geometry(p: WindowAttention, grid: tuple[int, int], x: TensorType | None = None):
    """Effective (window, shift) per grid dimension, as timm computes them."""
    if p.kind == "shifted" and p.window < 2:
        raise RuleError(f"a shifted window needs a window of at least 2 (its shift, window // 2, is 0)",
                        field="window", hint="use kind: window for 1x1 windows")
    shift = (p.shift if p.shift is not None else p.window // 2) if p.kind == "shifted" else 0
    if p.kind == "shifted" and not 0 < shift < p.window:
        raise RuleError(f"shift {shift} must lie between 0 and the window {p.window}", field="shift")
    windows, shifts = [], []
    for size in grid:
        if size <= p.window:  # the window covers the whole grid: no shift (timm)
            windows.append(size)
            shifts.append(0)
            continue
        if size % p.window:
            fits = [d for d in divisors(size) if 1 < d < size][-6:]
            trace = trace_text(x) if x is not None else ""
            more = suggest_input(x, size, p.window) if x is not None else ""
            raise RuleError(f"window {p.window} does not divide the {grid[0]}x{grid[1]} token grid{trace}",
                            field="window",
                            hint=f"use a window that divides {size} ({', '.join(map(str, fits))}){more}")
        windows.append(p.window)
        shifts.append(shift)
    return tuple(windows), tuple(shifts)


def sra_keys(p: SraAttention, x: TensorType) -> int | Sym:
    """Number of keys after the spatial reduction."""
    if p.sr_ratio == 1:
        return x.length
    h, w = need_grid(x, "sra (sr_ratio > 1)")
    if h % p.sr_ratio or w % p.sr_ratio:
        fits = [d for d in divisors(min(h, w)) if h % d == 0 and w % d == 0]
        raise RuleError(f"sr_ratio {p.sr_ratio} does not divide the {h}x{w} token grid{trace_text(x)}",
                        field="sr_ratio", hint=f"use a ratio that divides the grid ({', '.join(map(str, fits))})"
                                               f"{suggest_input(x, h, p.sr_ratio)}")
    return (h // p.sr_ratio) * (w // p.sr_ratio)


def infer(p, inputs: list[TensorType], ctx) -> TensorType:
    x = inputs[0]
    if x.layout != "tokens":
        raise RuleError(f"attention reads tokens, got {x.layout_name()}",
                        hint="patchify the image first" if x.layout == "image" else None)
    check_heads(p, x.channels)
    if p.kind in ("window", "shifted"):
        if p.bias == "cpb" and p.window == 1 and p.pretrained_window == 0:
            raise RuleError("the continuous position bias needs a window of at least 2", field="window")
        window_geometry(p, need_grid(x, p.kind), x)
    elif p.kind == "sra":
        sra_keys(p, x)
    elif p.kind == "linear_sra":
        need_grid(x, p.kind)
    elif p.kind == "cross":
        memory = inputs[1]
        if memory.layout != "tokens":
            raise RuleError(f"cross attention's memory must be tokens, got {memory.layout_name()}", field="from")
        if memory.channels != x.channels:
            raise RuleError(f"memory width {memory.channels} differs from the query width {x.channels}",
                            hint="project the memory to the same width first", field="from")
    return x  # same shape


def input_names(p) -> tuple[str, ...]:
    return ("x", "memory") if p.kind == "cross" else ("x",)


# -- costs ---------------------------------------------------------------------------------------


def _projections(width: int, p) -> int:
    """qkv (or q + kv) and the output projection."""
    qkv_bias = p.qkv_bias is True
    params = 3 * width * width + (3 * width if qkv_bias else 0) + linear_params(width, width, p.proj_bias)
    if p.qkv_bias == "qv":
        params += 2 * width
    return params


def _relative_bias_params(p: WindowAttention, windows) -> int:
    table = (2 * windows[0] - 1) * (2 * windows[1] - 1)
    if p.bias == "table":
        return table * p.heads
    if p.bias == "cpb":
        return linear_params(2, p.cpb_hidden) + p.cpb_hidden * p.heads
    return 0


def _relative_bias_flops(p: WindowAttention, windows) -> int:
    if p.bias != "cpb":
        return 0
    table = (2 * windows[0] - 1) * (2 * windows[1] - 1)
    return linear_flops(table, 2, p.cpb_hidden) + linear_flops(table, p.cpb_hidden, p.heads)


def cost(p, inputs: list[TensorType], out: TensorType) -> Cost:
    x = inputs[0]
    width, queries = x.channels, dim_value(x.length)
    params = _projections(width, p) + (norm_params(width) if p.norm != "none" else 0)
    keys = queries  # tokens whose keys and values are computed
    flops = linear_flops(queries, width, width)  # q (or its third of qkv)
    if p.kind in ("window", "shifted"):
        windows, _ = window_geometry(p, x.grid)
        params += _relative_bias_params(p, windows) + (p.heads if p.cosine else 0)
        flops += _relative_bias_flops(p, windows)
        area = windows[0] * windows[1]
        flops += attention_flops(queries, area, width)
    elif p.kind == "sra":
        keys = dim_value(sra_keys(p, x))
        if p.sr_ratio > 1:
            params += p.sr_ratio**2 * width * width + width + norm_params(width)
            flops += 2 * p.sr_ratio**2 * width * width * keys
        flops += attention_flops(queries, keys, width)
    elif p.kind == "linear_sra":
        keys = p.pool * p.pool
        params += linear_params(width, width) + norm_params(width)
        flops += linear_flops(keys, width, width) + attention_flops(queries, keys, width)
    elif p.kind == "cross":
        keys = dim_value(inputs[1].length)
        flops += attention_flops(queries, keys, width)
    else:  # global, causal
        flops += attention_flops(queries, queries, width)
    flops += linear_flops(keys, width, 2 * width)  # k and v
    flops += linear_flops(queries, width, width)  # output projection
    return Cost(params, flops)


PRIMITIVE = register(Primitive("attention", AttentionParams, infer, cost, input_names, doc=__doc__))
