"""pooled: multi-head pooling attention (MViTv2; timm mvitv2.py MultiScaleAttention, mode conv).

Queries, keys and values come from one linear (to `dim`, the output width); each is pooled on the
token grid by a depthwise convolution (kernel `kernel`, padding kernel // 2, no bias; one filter of
head_dim channels shared by the heads) followed by a LayerNorm over each head: the queries with
stride `stride_q`, keys and values with `stride_kv`. Pooling is left out where the kernel and the
stride are both 1. With `residual_pooling` the pooled queries are added to the attention's output
before the projection. `scores: [decomposed]` adds relative positions between the query grid and
the (coarser) key grid (timm's cal_rel_pos_type).

The output lies on the query grid (the input grid divided by stride_q) and is `dim` wide. As a
sub-layer (norm: pre) its residual is MViTv2's: the input, projected by a linear from the normed
input where the width changes (`shortcut_proj_attn`), and max-pooled on the grid (kernel
stride_q + 1, padding (stride_q + 1) // 2) where stride_q > 1 (`shortcut_pool_attn`).

    - attention: {kind: pooled, heads: 2, dim: 192, stride_q: 2, stride_kv: 2, scores: [decomposed]}
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from ....core.declared import Field
from ....core.suggestions import Divides, Remedy
from ....core.types import TensorType, grid_tokens
from ...base import Cost, Eps, PositiveInt, RuleError
from ...counting import FLOAT_BYTES, attention_flops, linear_flops, linear_params, norm_params
from ...decoding import Mixes, register_decoding
from ...grids import divisors, grid_origin, nearest_input, origin_text
from ...registry import register
from .common import AttentionOp, AttentionParams, check_heads, need_grid
from .scores.base import ScoreSite, check_bias_parts, parse_scores


class PooledParams(AttentionParams):
    kind: Literal["pooled"]
    dim: PositiveInt | None = Field(None, description="output width (queries, keys, values and the projection); "
                                                      "default: the input's")
    kernel: PositiveInt = Field(3, description="kernel of the depthwise pooling conv of q, k and v (odd; padding "
                                               "kernel // 2)")
    stride_q: PositiveInt = Field(1, description="pooling stride of the queries: the output grid is the input grid "
                                                 "divided by it")
    stride_kv: PositiveInt = Field(1, description="pooling stride of the keys and values")
    pool_eps: Eps = Field(1e-6, description="epsilon of the LayerNorm after each pooling")
    residual_pooling: bool = Field(True, description="add the pooled queries to the attention's output (MViTv2)")
    scores: list[Any] = Field(default_factory=list,
                              description="score parts that add a bias, over the query and key grids (decomposed)")


def pools(kernel: int, stride: int) -> bool:
    """Whether q (or k and v) are pooled: not where kernel and stride are both 1 (timm)."""
    return kernel > 1 or stride > 1


class PooledAttentionOp(AttentionOp):
    """Multi-head pooling attention (MViTv2): q, k and v pooled on the grid by a strided depthwise
    conv + LayerNorm, residual pooling, the output on the query grid, `dim` wide."""

    kind = "pooled"
    Params = PooledParams

    def one_grid(self, p) -> str | None:
        return "pooled attention's grids and relative position tables"

    def out_width(self, p, x: TensorType) -> int:
        return p.dim or x.channels

    def grids(self, p, x: TensorType) -> tuple[tuple[int, int], tuple[int, int]]:
        """(query grid, key grid): the input grid divided by stride_q and by stride_kv."""
        h, w = need_grid(x, self.kind)
        if p.kernel % 2 == 0:
            raise RuleError(f"kernel {p.kernel} must be odd: the pooling pads kernel // 2 on each side, and an "
                            "even kernel would grow the grid by one", field="kernel",
                            hint=Remedy(f"use kernel {p.kernel - 1} or {p.kernel + 1} (MViTv2: 3)"))
        for field, stride in (("stride_q", p.stride_q), ("stride_kv", p.stride_kv)):
            if h % stride or w % stride:
                fits = tuple(d for d in divisors(min(h, w)) if h % d == 0 and w % d == 0)
                origin = grid_origin(x)
                raise RuleError(f"{field} {stride} does not divide the {h}x{w} token grid{origin_text(x)}",
                                field=field, hint=Divides("stride", None, shown=fits, candidates=fits),
                                grid=origin, input=nearest_input(origin, h, stride))
        return (h // p.stride_q, w // p.stride_q), (h // p.stride_kv, w // p.stride_kv)

    def score_site(self, p, inputs: list[TensorType]) -> ScoreSite:
        x = inputs[0]
        (qh, qw), (kh, kw) = self.grids(p, x)
        dim = self.out_width(p, x)
        return ScoreSite(p.heads, dim // p.heads, qh * qw, kh * kw, (qh, qw), x, key_grid=(kh, kw))

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "tokens":
            raise RuleError(f"attention reads tokens, got {x.layout_name()}",
                            hint="patchify the image first" if x.layout == "image" else None)
        p.check_structure()
        if p.norm not in ("pre", "none"):
            raise RuleError(f"pooled attention's residual is pooled and projected from the input (MViTv2), which "
                            f"goes with norm: pre or none, not {p.norm}", field="norm",
                            hint=Remedy("use norm: pre (MViTv2)"))
        dim = self.out_width(p, x)
        check_heads(p, dim)
        query_grid, _ = self.grids(p, x)
        self.check_scores(p, inputs)
        if p.stride_q == 1:
            return replace(x, shape=x.shape[:-1] + (dim,))  # [B, N, C] -> [B, N, dim], the grid kept
        origin = grid_origin(x).then("pool", p.stride_q)
        return grid_tokens(query_grid, dim, origin=origin)  # [B, H*W, C] -> [B, H/s * W/s, dim]

    def check_scores(self, p, inputs: list[TensorType]) -> None:
        """Each part adds a bias and fits the query and key grids."""
        check_bias_parts(p.scores, self.score_site(p, inputs), self.kind, "use a bias part (decomposed) here")

    def score_bytes(self, p, inputs: list[TensorType]) -> int:
        site = self.score_site(p, inputs)
        return FLOAT_BYTES * p.heads * site.queries * site.keys

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        """qkv over every token, the three poolings (depthwise conv + LayerNorm of head_dim), the
        attention over the pooled grids, the projection of the pooled queries, the score parts, the
        sub-layer's norm and the shortcut's projection where the width changes (MaxPool: no FLOPs)."""
        x = inputs[0]
        width, dim = x.channels, self.out_width(p, x)
        tokens = x.grid[0] * x.grid[1]
        site = self.score_site(p, inputs)
        head = dim // p.heads
        params = linear_params(width, 3 * dim, p.qkv_bias) + linear_params(dim, dim, p.proj_bias)
        flops = linear_flops(tokens, width, 3 * dim) + linear_flops(site.queries, dim, dim)
        for stride, count, pooled in ((p.stride_q, 1, site.queries), (p.stride_kv, 2, site.keys)):
            if pools(p.kernel, stride):
                params += count * (head * p.kernel * p.kernel + norm_params(head))
                flops += count * 2 * p.kernel * p.kernel * dim * pooled  # depthwise: k^2 MACs per channel
        flops += attention_flops(site.queries, site.keys, dim)
        buffers = 0
        for use in parse_scores(p.scores):
            part = use.part.cost(use.params, site)
            params, flops, buffers = params + part.params, flops + part.flops, buffers + part.buffer_bytes
        params += norm_params(width) if p.norm == "pre" else 0
        params += dim if p.layer_scale is not None else 0
        if p.residual and dim != width:
            params += linear_params(width, dim)
            flops += linear_flops(tokens, width, dim)
        return Cost(params, flops, buffers, self.score_bytes(p, inputs))


POOLED = register(PooledAttentionOp())
register_decoding(POOLED, Mixes("it pools the token grid (queries, keys and values), so every token reads its "
                                "neighbours on the grid, later ones included"))
