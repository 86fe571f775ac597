"""shifted: SW-MSA, window attention after a cyclic shift of the grid (by half a window
unless `shift` says otherwise), with the mask that keeps regions that were not neighbours
apart; the shift is 0 where the window covers the whole grid (timm SwinTransformerBlock)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType
from ...base import PositiveInt, RuleError
from ...registry import register
from .window import WindowAttentionOp, WindowParams
from ...decoding import Mixes, register_decoding


class ShiftedParams(WindowParams):
    kind: Literal["shifted"]
    shift: PositiveInt | None = Field(None, description="cyclic shift; default window // 2")


class ShiftedWindowAttentionOp(WindowAttentionOp):
    """Window attention after a cyclic shift by half a window (timm Swin SW-MSA)."""

    kind = "shifted"
    Params = ShiftedParams

    def one_grid(self, p) -> str | None:
        return "shifted windows' masks"

    def shift(self, p) -> int:
        return p.shift if p.shift is not None else p.window // 2

    def check(self, p, inputs: list[TensorType]) -> None:
        if p.window < 2:
            raise RuleError("a shifted window needs a window of at least 2 (its shift, window // 2, is 0)",
                            field="window", hint=Remedy("use kind: window for 1x1 windows"))
        if not 0 < self.shift(p) < p.window:
            raise RuleError(f"shift {self.shift(p)} must lie between 0 and the window {p.window}", field="shift")
        super().check(p, inputs)


SHIFTED = register(ShiftedWindowAttentionOp())
register_decoding(SHIFTED, Mixes("it lets a token see later tokens (only causal, sliding and alibi attention are cached)"))
