"""Token grids and images as the shape rules see them: divisors for hints, how a grid came
about (for messages), the nearest input at which a grid fits, convolution output grids, and
reading a grid as an image."""

from __future__ import annotations

import math

from ..core.suggestions import GridOrigin, NearestInput
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


def divisors_near(n: int, wanted: int, count: int = 6) -> list[int]:
    """The `count` divisors of n (but 1) nearest `wanted` by ratio, ascending: the sizes a
    hint offers in place of a size that does not divide (3904 near 48: 16, 32, 61, 64, 122, 244)."""
    inner = [d for d in divisors(n) if d > 1] or [n]
    nearest = sorted(inner, key=lambda d: (abs(math.log(d / max(wanted, 1))), d))[:count]
    return sorted(nearest)


def origin_text(x: TensorType) -> str:
    """' (image 240 / patch 4 / merge 2)': how a grid came about, for error messages."""
    return f" ({x.origin})" if x.origin is not None else ""


def grid_origin(x: TensorType) -> GridOrigin | None:
    """How the grid of tokens (or of a mask) came about; None when `x` has no grid (a grid
    declared on an input has an origin without an image)."""
    return (x.origin or GridOrigin()) if x.grid is not None else None


def image_origin(x: TensorType) -> GridOrigin:
    """How an image came about: its own origin, else the image itself (a graph input)."""
    return x.origin or GridOrigin((x.shape[2], x.shape[3]))


def nearest_input(origin: GridOrigin | None, side: int, multiple: int) -> NearestInput | None:
    """The nearest square image whose grid side here (now `side`) is a multiple of `multiple`;
    None when the grid did not come from a square image that `side` divides."""
    image = origin.square_image if origin is not None else None
    if image is None or image % side:
        return None
    step = image // side * multiple
    candidates = [k * step for k in (image // step, image // step + 1) if k > 0]
    return NearestInput(min(candidates, key=lambda s: (abs(s - image), s)))


def conv_grid(size: tuple[int, int], kernel: int, stride: int, padding: int) -> tuple[int, int]:
    return tuple((s + 2 * padding - kernel) // stride + 1 for s in size)  # type: ignore[return-value]


def as_image(x: TensorType, what: str) -> tuple[int, tuple[int, int], GridOrigin]:
    """(channels, (H, W), origin) of an image, or of a token grid read as an image (a grid
    declared on an input has an origin without an image)."""
    if x.layout == "image":
        return x.channels, (x.shape[2], x.shape[3]), image_origin(x)
    if x.layout == "tokens" and x.grid and not x.prefix:
        return x.channels, x.grid, x.origin or GridOrigin()
    if x.layout == "tokens" and x.prefix:
        raise RuleError(f"{what} needs a token grid without class tokens; these tokens have "
                        f"{plural(x.prefix, 'class token')}",
                        hint=f"take the grid's tokens alone first: `slice: {{start: {x.prefix}}}` (the class tokens "
                             "come first; `from:` them again where they rejoin)")
    hint = None
    if x.layout == "tensor" and len(x.shape) == 4:
        hint = "a rearrange with `as: image` reads a rank-4 tensor as an image"
    elif x.layout == "tokens":
        hint = "to_tokens of an image, or a rearrange of one (`b c h w -> b (h w) c`), gives tokens on a grid"
    raise RuleError(f"{what} needs an image or a token grid, got {x.layout_name()}", hint=hint)
