"""Token grids and images as the shape rules see them: divisors for hints, how a grid came
about (for messages), convolution output grids, and reading a grid as an image."""

from __future__ import annotations

from ..core.types import TensorType
from ..core.words import plural
from .base import RuleError


def divisors(n: int) -> list[int]:
    """Divisors of n, ascending; O(sqrt(n))."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def trace_text(x: TensorType) -> str:
    """' (image 240 / patch 4 / merge 2)': how a grid came about, for error messages."""
    return f" ({' / '.join(x.trace)})" if x.trace else ""


def suggest_input(x: TensorType, grid: int, multiple: int) -> str:
    """' or an input of 224': the nearest square image whose grid here is a multiple of `multiple`."""
    if not x.trace or not x.trace[0].startswith("image ") or "x" in x.trace[0]:
        return ""
    image = int(x.trace[0].split()[1])
    if image % grid:
        return ""
    step = image // grid * multiple
    candidates = [k * step for k in (image // step, image // step + 1) if k > 0]
    best = min(candidates, key=lambda s: (abs(s - image), s))
    return f" or an input of {best}"


def conv_grid(size: tuple[int, int], kernel: int, stride: int, padding: int) -> tuple[int, int]:
    return tuple((s + 2 * padding - kernel) // stride + 1 for s in size)  # type: ignore[return-value]


def as_image(x: TensorType, what: str) -> tuple[int, tuple[int, int], tuple[str, ...]]:
    """(channels, (H, W), trace) of an image, or of a token grid read as an image."""
    if x.layout == "image":
        h, w = x.shape[2], x.shape[3]
        trace = x.trace or (f"image {h}" if h == w else f"image {h}x{w}",)
        return x.channels, (h, w), trace
    if x.layout == "tokens" and x.grid and not x.prefix:
        return x.channels, x.grid, x.trace
    if x.layout == "tokens" and x.prefix:
        raise RuleError(f"{what} needs a token grid without class tokens; these tokens have "
                        f"{plural(x.prefix, 'class token')}")
    raise RuleError(f"{what} needs an image or a token grid, got {x.layout_name()}")
