"""Pooling tokens to one vector, as the classify and features heads do."""

from __future__ import annotations

from typing import Literal

from ....core.suggestions import Remedy
from ....core.types import TensorType
from ...base import RuleError, not_tokens_hint

Pool = Literal["cls", "mean", "eos", "map", "none"]


def check_pool(pool: str, x: TensorType) -> None:
    if x.layout != "tokens":
        raise RuleError(f"pooling reads tokens, got {x.layout_name()}", hint=not_tokens_hint(x))
    if pool == "cls" and not x.prefix:
        raise RuleError("pool: cls needs a class token, and these tokens have none", field="pool",
                        hint=Remedy("use pool: mean, or patchify with cls_token: true"))
    if pool == "mean" and x.prefix and not x.grid:
        raise RuleError("pool: mean over tokens without a grid cannot leave out class tokens", field="pool")
