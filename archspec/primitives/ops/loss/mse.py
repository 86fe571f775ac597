"""mse: the mean squared error of a prediction and a target of the same shape (torch's
F.mse_loss), over every value; with `mask: true`, a third input [B, L] of 0/1 ids keeps the
tokens marked 1 alone, the mean taken over their values (the Decision Transformer's action loss:
`action_preds[attention_mask > 0]`)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType
from ...base import RuleError, check_padding_mask, require_float
from ...registry import register
from .common import LossOp, LossParams
from ...decoding import Mixes, register_decoding


class MseParams(LossParams):
    kind: Literal["mse"]
    mask: bool = Field(False, description="read a mask [B, L] (1 keeps a token, 0 leaves it out) as the third "
                                          "input: the mean over the kept tokens' values")


class MeanSquaredError(LossOp):
    """mean((prediction - target)^2), over every value or over the tokens a mask keeps."""

    kind = "mse"
    Params = MseParams

    def reads(self, p) -> tuple[str, ...]:
        return ("prediction", "target", "mask") if p.mask else ("prediction", "target")

    def check(self, p, inputs: list[TensorType]) -> None:
        prediction, target = inputs[:2]
        require_float(prediction, "mse's prediction")
        require_float(target, "mse's target")
        if tuple(prediction.shape) != tuple(target.shape):
            raise RuleError(f"prediction {prediction.describe()} and target {target.describe()} differ in shape",
                            field="from", hint="the target is declared under `targets` with the prediction's shape")
        if p.mask:
            if prediction.layout != "tokens":
                raise RuleError(f"a mask keeps tokens, and the prediction is {prediction.layout_name()}",
                                field="mask", hint="drop mask, or predict tokens [B, L, C]")
            check_padding_mask(inputs[2], prediction.length, "tokens")

    def value_range(self, p, slot: int, ctx) -> int | None:
        return 2 if p.mask and slot == 2 else None


MSE = register(MeanSquaredError())
register_decoding(MSE, Mixes("a loss sums over the tokens"))
