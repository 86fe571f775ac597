"""What every attention kind shares: the parameters, the heads-divide-width rule, the grid
requirement of the spatial kinds, and the cost of the projections.

A kind subclasses `AttentionOp`, sets `kind` and `Params`, and overrides `check` (its own
shape rules), `keys` (how many tokens keys and values are computed for), `core_cost` (the
attention products and whatever else the kind adds) and, where its queries are not every token
or its scores come in windows, `score_bytes` (the score matrices, for the memory estimate).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ....core.declared import Field
from ....core.types import Sym, TensorType, dim_value
from ....core.words import plural
from ....core.suggestions import Divides, Remedy
from ...base import Cost, Op, PositiveInt, Rate, RuleError, SublayerParams, not_tokens_hint, sublayer_params
from ...counting import FLOAT_BYTES, attention_flops, linear_flops, linear_params
from ...grids import divisors
from .scores.base import parse_scores
from ...dtypes import READS, FLOAT_FIRST


class AttentionParams(SublayerParams):
    heads: PositiveInt = Field(description="number of attention heads; must divide the width")
    qkv_bias: bool = Field(True, description="biases on the q, k and v projections")
    proj_bias: bool = True
    attn_drop: Rate = 0.0
    proj_drop: Rate = 0.0


MergeHeads = Literal["head_major", "dim_major"]


def merge_heads_field():
    """`merge_heads`: the order the heads' outputs are concatenated in before the projection."""
    return Field("head_major", description="the heads' outputs concatenated as (heads, head_dim): head_major, each "
                                           "head's channels together; or (head_dim, heads): dim_major, each "
                                           "channel's heads together (NesT)")


def check_heads(p: AttentionParams, width: int) -> None:
    if width % p.heads:
        fits = [d for d in divisors(width) if d <= 64][-8:]
        raise RuleError(f"{p.heads} heads do not divide the width {width}", field="heads",
                        hint=Divides("number of heads", width, tuple(fits), tuple(divisors(width)[1:-1])))


def need_grid(x: TensorType, kind: str) -> tuple[int, int]:
    if x.layout != "tokens" or x.grid is None:
        hint = ("patchify the image first" if x.layout == "image"
                else "tokens are on a grid when they come from patchify, to_tokens or a rearrange of an image "
                     "(`b c h w -> b (h w) c`), or from an input declared with `grid: [H, W]`")
        raise RuleError(f"{kind} attention needs a token grid, got {x.layout_name()}", field="kind", hint=hint)
    if x.prefix:
        raise RuleError(f"{kind} attention cannot run over class tokens; these tokens have "
                        f"{plural(x.prefix, 'class token')}", field="kind",
                        hint=Remedy("use global attention, or patchify without cls_token"))
    return x.grid


def projection_params(width: int, p: AttentionParams, kv_width: int | None = None, inner: int | None = None) -> int:
    """qkv (or q + kv) and the output projection; queries are `inner` wide (heads x head width,
    the width by default), keys and values `kv_width` (narrower with grouped-query attention)."""
    kv_width = width if kv_width is None else kv_width
    inner = width if inner is None else inner
    params = (inner + 2 * kv_width) * width + linear_params(inner, width, p.proj_bias)
    if p.qkv_bias is True:
        params += inner + 2 * kv_width
    elif p.qkv_bias == "qv":
        params += inner + kv_width
    return params


class AttentionOp(Op):
    primitive = "attention"
    Params = AttentionParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout != "tokens":
            raise RuleError(f"attention reads tokens, got {x.layout_name()}", hint=not_tokens_hint(x))
        p.check_structure()
        if getattr(p, "head_dim", None) is None:
            check_heads(p, x.channels)
        self.check(p, inputs)
        return x  # same shape

    def check(self, p, inputs: list[TensorType]) -> None:
        """The kind's own shape rules (RuleError when one fails)."""

    def one_grid(self, p) -> str | None:
        """A score part's table made for one grid (BEiT's and CoAtNet's relative_table), if any."""
        found = [use.part.one_grid for use in parse_scores(getattr(p, "scores", None) or [])]
        return next((words for words in found if words), None)

    def keys(self, p, inputs: list[TensorType]) -> int:
        """Tokens whose keys and values are computed."""
        return dim_value(inputs[0].length)

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        """The attention products, plus any parameters and FLOPs the kind adds."""
        x = inputs[0]
        return Cost(0, attention_flops(dim_value(x.length), self.keys(p, inputs), x.channels))

    def score_bytes(self, p, inputs: list[TensorType]) -> int:
        """The score matrices, float32, per sample: heads x queries x keys (every token a query),
        at the shortest lengths the spec allows: what the build's run holds (ONNX Runtime's check
        runs at short example lengths), not what a long run would."""
        shortest = [at_shortest(t) for t in inputs]
        return FLOAT_BYTES * p.heads * dim_value(shortest[0].length) * self.keys(p, shortest)

    def kv_width(self, p, width: int) -> int:
        """Width of the keys (and of the values)."""
        return width

    def inner_width(self, p, width: int) -> int:
        """Width of the queries and of the attention's output before its projection."""
        return width

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        width, queries = x.channels, dim_value(x.length)
        kv_width, inner = self.kv_width(p, width), self.inner_width(p, width)
        core = self.core_cost(p, inputs)
        params = projection_params(width, p, kv_width, inner) + sublayer_params(p, width) + core.params
        flops = linear_flops(queries, width, inner)  # q (or its part of qkv)
        flops += linear_flops(self.keys(p, inputs), width, 2 * kv_width)  # k and v
        flops += linear_flops(queries, inner, width)  # output projection
        return Cost(params, flops + core.flops, core.buffer_bytes, self.score_bytes(p, inputs))


def at_shortest(t: TensorType) -> TensorType:
    """`t` with every symbolic length at the smallest size it may take."""
    shape = tuple(Sym(d.name, d.lo, d.lo) if isinstance(d, Sym) else d for d in t.shape)
    return replace(t, shape=shape)


READS.register_family(AttentionOp, FLOAT_FIRST)  # every kind: the tokens float; a mask or a bias, the kind's rule
