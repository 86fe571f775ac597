"""What the loss kinds share: a weight in the total, a scalar result, no parameters or FLOPs."""

from __future__ import annotations

from ....core.declared import Field
from ....core.types import TensorType, scalar
from ...base import Cost, Op, Params
from ...dtypes import READS, ANY


class LossParams(Params):
    weight: float = Field(1.0, ge=0, description="weight of this objective in the total loss")


class LossOp(Op):
    primitive = "loss"
    objective = True

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        self.check(p, inputs)
        return scalar()  # a number

    def check(self, p, inputs: list[TensorType]) -> None:
        """The kind's own rules about its inputs."""

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)  # objectives are not part of the network's cost


READS.register_family(LossOp, ANY)  # logits and int64 labels or masks: each kind's rule checks them
