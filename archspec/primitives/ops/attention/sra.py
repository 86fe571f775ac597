"""sra: spatial-reduction attention; keys and values from the grid reduced by a convolution
(kernel = stride = sr_ratio) and a LayerNorm (PVT v1, timm pvt_v2)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Divides
from ....core.types import TensorType, dim_value
from ...base import Cost, Eps, PositiveInt, RuleError
from ...counting import attention_flops, norm_params
from ...grids import divisors, grid_origin, nearest_input, origin_text
from ...registry import register
from .common import AttentionOp, AttentionParams, need_grid
from ...decoding import Mixes, register_decoding


class SraParams(AttentionParams):
    kind: Literal["sra"]
    sr_ratio: PositiveInt = Field(1, description="keys/values from the grid reduced by conv(k = s = sr_ratio)")
    sr_eps: Eps = Field(1e-5, description="epsilon of the LayerNorm after the reduction")


class SpatialReductionAttentionOp(AttentionOp):
    """Keys and values from the grid reduced by conv(k = s = R) + LayerNorm (PVT)."""

    kind = "sra"
    Params = SraParams

    def check(self, p, inputs: list[TensorType]) -> None:
        self.keys(p, inputs)

    def keys(self, p, inputs: list[TensorType]) -> int:
        """Number of keys after the spatial reduction."""
        x = inputs[0]
        if p.sr_ratio == 1:
            return dim_value(x.length)
        h, w = need_grid(x, "sra (sr_ratio > 1)")
        if h % p.sr_ratio or w % p.sr_ratio:
            fits = tuple(d for d in divisors(min(h, w)) if h % d == 0 and w % d == 0)
            origin = grid_origin(x)
            raise RuleError(f"sr_ratio {p.sr_ratio} does not divide the {h}x{w} token grid{origin_text(x)}",
                            field="sr_ratio", grid=origin,
                            hint=Divides("ratio", None, shown=fits, candidates=fits, reshapes_weights=True),
                            input=nearest_input(origin, h, p.sr_ratio))
        return (h // p.sr_ratio) * (w // p.sr_ratio)

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        x = inputs[0]
        width, keys = x.channels, self.keys(p, inputs)
        params = flops = 0
        if p.sr_ratio > 1:
            params = p.sr_ratio**2 * width * width + width + norm_params(width)
            flops = 2 * p.sr_ratio**2 * width * width * keys
        return Cost(params, flops + attention_flops(dim_value(x.length), keys, width))


SRA = register(SpatialReductionAttentionOp())
register_decoding(SRA, Mixes("it lets a token see later tokens (only causal, sliding and alibi attention are cached)"))
