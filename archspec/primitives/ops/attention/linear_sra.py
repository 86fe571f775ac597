"""linear_sra: keys and values from an adaptive average pool of the grid to PxP, a 1x1
convolution, a LayerNorm and a GELU (timm pvt_v2, linear=True)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType, dim_value
from ...base import Cost, Eps, PositiveInt, RuleError
from ...counting import attention_flops, linear_flops, linear_params, norm_params
from ...grids import grid_origin
from ...registry import register
from .common import AttentionOp, AttentionParams, need_grid
from ...decoding import Mixes, register_decoding


class LinearSraParams(AttentionParams):
    kind: Literal["linear_sra"]
    pool: PositiveInt = Field(7, description="keys/values from an adaptive average pool to pool x pool")
    sr_eps: Eps = 1e-5


class LinearSpatialReductionAttentionOp(AttentionOp):
    """Keys and values from a PxP average pool + 1x1 conv + LayerNorm + GELU (PVT v2-li)."""

    kind = "linear_sra"
    Params = LinearSraParams

    def check(self, p, inputs: list[TensorType]) -> None:
        x = inputs[0]
        h, w = need_grid(x, self.kind)
        if p.pool > min(h, w):
            raise RuleError(f"pool {p.pool} is larger than the {h}x{w} token grid: the average pool would "
                            "stretch the grid instead of reducing it", field="pool",
                            hint=Remedy(f"use a pool of at most {min(h, w)}"), grid=grid_origin(x))

    def keys(self, p, inputs: list[TensorType]) -> int:
        return p.pool * p.pool

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        x = inputs[0]
        width, keys = x.channels, self.keys(p, inputs)
        params = linear_params(width, width) + norm_params(width)
        flops = linear_flops(keys, width, width) + attention_flops(dim_value(x.length), keys, width)
        return Cost(params, flops)


LINEAR_SRA = register(LinearSpatialReductionAttentionOp())
register_decoding(LINEAR_SRA, Mixes("it lets a token see later tokens (only causal, sliding and alibi attention are cached)"))
