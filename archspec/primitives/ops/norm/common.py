"""What the norm kinds share: the layouts they read, and the `bias` option of those with a bias."""

from __future__ import annotations

from typing import Annotated

from ....core.declared import Field
from ....core.types import TensorType
from ...base import RuleError, not_tokens_hint

Bias = Annotated[bool, Field(description="a learned bias (false: none, as torch's LayerNorm(bias=False); the "
                                         "parameters are the weight only)")]


def check_normalisable(x: TensorType, image: bool = False) -> TensorType:
    """`x` when the norm reads it: tokens or a feature vector, or with `image`, an image too
    (normalised over its channels at every pixel, as timm's LayerNorm2d)."""
    if image and x.layout == "image":
        return x  # same shape
    if x.layout not in ("tokens", "vector"):
        takes = "tokens, an image or a feature vector" if image else "tokens or a feature vector"
        hint = not_tokens_hint(x) or ("a norm normalises the channels: of tokens [B, N, C] (last), of an image "
                                      "[B, C, H, W] (second)" if image else "a norm normalises the channels of tokens")
        raise RuleError(f"norm needs {takes}, got {x.layout_name()}", hint=hint)
    return x  # same shape
