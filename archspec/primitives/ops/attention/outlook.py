"""outlook: VOLO's outlook attention (Yuan et al., "VOLO: Vision Outlooker for Visual
Recognition", 2021; timm OutlookAttention). Each place of the grid (every `stride`-th one, its
input average-pooled over stride x stride) predicts, per head, the weights of its k x k
neighbourhood by a linear map straight from the token (no queries or keys): softmax over the
k*k source places for each of the k*k target places. The values of the neighbourhood (unfold)
are mixed by those weights and folded back onto the grid, summing where neighbourhoods overlap,
then projected. Parameters: `v` (width x width), `attn` (width -> heads x k^4, with bias) and
`proj`; k, padding and stride are timm's (3, 1, 2 in VOLO's first stage).

    - {id: attn, attention: {kind: outlook, heads: 6, kernel_size: 3, padding: 1, stride: 2}}
"""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType
from ...base import Cost, NonNegInt, PositiveInt, RuleError, sublayer_params
from ...counting import FLOAT_BYTES, linear_flops, linear_params
from ...decoding import Mixes, register_decoding
from ...registry import register
from .common import AttentionOp, AttentionParams, need_grid


class OutlookParams(AttentionParams):
    kind: Literal["outlook"]
    kernel_size: PositiveInt = Field(3, description="the neighbourhood each place attends over: k x k")
    padding: NonNegInt = Field(1, description="zeros around the grid when the neighbourhoods are unfolded")
    stride: PositiveInt = Field(1, description="the step between the places whose weights are predicted "
                                               "(the grid average-pooled by it, rounding up)")
    qkv_bias: bool = Field(False, description="a bias on the value projection `v` (timm's qkv_bias)")


def ceil_div(n: int, d: int) -> int:
    return -(-n // d)


def neighbourhoods(p, grid: tuple[int, int]) -> tuple[int, int]:
    """The places (rows, columns) whose neighbourhoods are mixed: ceil(H / stride) x ceil(W / stride),
    which must be the blocks the unfold gives; RuleError where they differ."""
    k, pad, s = p.kernel_size, p.padding, p.stride
    places = []
    for n in grid:
        if n + 2 * pad < k:
            raise RuleError(f"outlook attention: a {k}x{k} neighbourhood is larger than the {grid[0]}x{grid[1]} "
                            f"token grid padded by {pad}", field="kernel_size",
                            hint="use a smaller kernel_size or more padding (VOLO: kernel_size 3, padding 1)")
        unfolded, pooled = (n + 2 * pad - k) // s + 1, ceil_div(n, s)
        if unfolded != pooled:
            raise RuleError(f"outlook attention: over the {grid[0]}x{grid[1]} token grid, kernel_size {k}, padding "
                            f"{pad} and stride {s} give {unfolded} neighbourhoods along an axis, but the grid pooled "
                            f"by the stride has {pooled} places", field="padding",
                            hint=Remedy(f"use padding {max(0, (k - 1) // 2)} with an odd kernel_size "
                                        f"(VOLO: kernel_size 3, padding 1, stride 2)"))
        places.append(pooled)
    return places[0], places[1]


class OutlookAttentionOp(AttentionOp):
    """Weights of each place's k x k neighbourhood predicted from the place itself (VOLO)."""

    kind = "outlook"
    Params = OutlookParams

    def check(self, p, inputs: list[TensorType]) -> None:
        neighbourhoods(p, need_grid(inputs[0], "outlook"))

    def places(self, p, inputs: list[TensorType]) -> int:
        h, w = neighbourhoods(p, need_grid(inputs[0], "outlook"))
        return h * w

    def keys(self, p, inputs: list[TensorType]) -> int:
        """Each place attends over k*k values."""
        return p.kernel_size**2

    def score_bytes(self, p, inputs: list[TensorType]) -> int:
        """heads x places x (k*k)^2 weights, float32, per sample."""
        return FLOAT_BYTES * p.heads * self.places(p, inputs) * p.kernel_size**4

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        """v and proj over every token; attn over the pooled places; each place's k^2 x k^2 weights
        times its k^2 values of width/heads, for every head: 2 * places * k^4 * width."""
        x = inputs[0]
        width, tokens, places, k2 = x.channels, x.grid[0] * x.grid[1], self.places(p, inputs), p.kernel_size**2
        params = (linear_params(width, width, p.qkv_bias) + linear_params(width, p.heads * k2 * k2)
                  + linear_params(width, width, p.proj_bias) + sublayer_params(p, width))
        flops = linear_flops(tokens, width, width) + linear_flops(places, width, p.heads * k2 * k2)
        flops += 2 * places * k2 * k2 * width  # the weights times the values
        flops += linear_flops(tokens, width, width)  # proj
        return Cost(params, flops, 0, self.score_bytes(p, inputs))


OUTLOOK = register(OutlookAttentionOp())
register_decoding(OUTLOOK, Mixes("outlook attention mixes each token's k x k neighbourhood on the grid, later "
                                 "tokens included (only causal, sliding and alibi attention are cached)"))
