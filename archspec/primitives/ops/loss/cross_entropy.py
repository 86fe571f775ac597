"""cross_entropy: classification loss of logits against integer targets: class logits [B, C]
with labels [B], or per-token logits [B, L, V] with ids [B, L] (a language model; `shift`
predicts token t+1 from position t). Targets equal to `ignore_index` do not count."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType
from ...base import RuleError
from ...grids import grid_origin
from ...registry import register
from .common import LossOp, LossParams
from ...decoding import Mixes, register_decoding


class CrossEntropyParams(LossParams):
    kind: Literal["cross_entropy"]
    ignore_index: int = Field(-100, description="targets with this value are left out of the mean")
    shift: bool = Field(False, description="language modelling: logits at t predict the target at t + 1")
    label_smoothing: float = Field(0.0, ge=0, lt=1)


class CrossEntropy(LossOp):
    """mean cross-entropy of softmax(logits) against the target classes."""

    kind = "cross_entropy"
    Params = CrossEntropyParams

    def reads(self, p) -> tuple[str, ...]:
        return ("logits", "target")

    def check(self, p, inputs: list[TensorType]) -> None:
        logits, target = inputs
        if logits.layout == "vector":
            if target.layout != "labels":
                raise RuleError(f"class logits [B, C] need labels [B] (int64) as the target, got "
                                f"{target.layout_name()}", field="from")
            if p.shift:
                raise RuleError("shift is for per-token logits (a language model)", field="shift")
        elif logits.layout == "tokens":
            if target.layout != "ids" or target.length != logits.length:
                raise RuleError(f"per-token logits {logits.describe()} need ids [B, {logits.length}] as the "
                                f"target, got {target.describe()}", field="from", grid=grid_origin(logits))
        else:
            raise RuleError(f"cross_entropy reads logits [B, C] or [B, L, V], got {logits.layout_name()}",
                            field="from")

    def value_range(self, p, slot: int, ctx) -> int | None:
        if slot != 1:
            return None
        return ctx.node_named(ctx.node.inputs[0]).type.channels  # targets are classes of the logits


CROSS_ENTROPY = register(CrossEntropy())
register_decoding(CROSS_ENTROPY, Mixes("a loss sums over the tokens"))
