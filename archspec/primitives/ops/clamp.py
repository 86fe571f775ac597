"""clamp: x held within [min, max] (torch.clamp): F.normalize's max(|x|, eps) under a divide
(XCiT's L2-normalised q and k), a cap on a learned scale (CLIP's logit scale at most ln 100).

    clamp: {min: 1.0e-12}            max(x, 1e-12)
    clamp: {min: -1, max: 1}
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from ...core.types import TensorType
from ..base import Cost, Op, Params, RuleError, require_float
from ..registry import register


class ClampParams(Params):
    min: Optional[float] = Field(None, allow_inf_nan=False, description="the least value (none: no lower bound)")
    max: Optional[float] = Field(None, allow_inf_nan=False, description="the greatest value (none: no upper bound)")


class ClampOp(Op):
    """min(max(x, min), max), element-wise; the output has the input's type."""

    primitive = "clamp"
    Params = ClampParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if p.min is None and p.max is None:
            raise RuleError("clamp needs `min`, `max` or both", field="min", hint="e.g. clamp: {min: 1.0e-12}")
        if p.min is not None and p.max is not None and p.min > p.max:
            raise RuleError(f"clamp's min {p.min} is above its max {p.max}", field="min")
        require_float(x, "clamp")
        return x

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


CLAMP = register(ClampOp())
