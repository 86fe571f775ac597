"""What the norm kinds share: the layouts they read."""

from __future__ import annotations

from ....core.types import TensorType
from ...base import RuleError


def check_normalisable(x: TensorType) -> TensorType:
    if x.layout not in ("tokens", "vector"):
        raise RuleError(f"norm needs tokens or a feature vector, got {x.layout_name()}",
                        hint="a norm normalises the channels of tokens; patchify an image first")
    return x  # same shape
