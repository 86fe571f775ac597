"""contrastive: CLIP's loss. Image-text logits [B, B] whose diagonal holds the matching pairs:
the mean of the cross-entropy along rows (image -> text) and along columns (text -> image)."""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType
from ...base import RuleError
from ...registry import register
from .common import LossOp, LossParams
from ...decoding import Mixes, register_decoding


class ContrastiveLossParams(LossParams):
    kind: Literal["contrastive"]


class ContrastiveLossOp(LossOp):
    """(CE(logits, arange(B)) + CE(logits^T, arange(B))) / 2."""

    kind = "contrastive"
    Params = ContrastiveLossParams

    def reads(self, p) -> tuple[str, ...]:
        return ("logits",)

    def check(self, p, inputs: list[TensorType]) -> None:
        if inputs[0].layout != "matrix":
            raise RuleError(f"a contrastive loss reads image-text logits [B, B], got {inputs[0].layout_name()}",
                            field="from", hint="read a head of kind contrastive")


CONTRASTIVE_LOSS = register(ContrastiveLossOp())
register_decoding(CONTRASTIVE_LOSS, Mixes("a loss sums over the tokens"))
