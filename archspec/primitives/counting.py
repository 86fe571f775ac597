"""Parameter and FLOP formulas shared by the cost rules (FLOPs as FlopCounterMode counts
them: multiply-add = 2; matmuls, convolutions and attention products only)."""

from __future__ import annotations

FLOAT_BYTES = 4  # a float32 table or mask
INDEX_BYTES = 8  # an int64 index


def linear_flops(tokens: int, fan_in: int, fan_out: int) -> int:
    return 2 * tokens * fan_in * fan_out


def linear_params(fan_in: int, fan_out: int, bias: bool = True) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def attention_flops(queries: int, keys: int, width: int) -> int:
    """Q K^T and A V over all heads: 2 * 2 * Lq * Lk * C."""
    return 4 * queries * keys * width


def norm_params(width: int) -> int:
    return 2 * width


def hidden_width(width: int, hidden: int | None, ratio: float | None) -> int:
    """Hidden width of an MLP, as timm computes it: int(dim * mlp_ratio)."""
    if hidden is not None:
        return hidden
    return int(width * ratio)
