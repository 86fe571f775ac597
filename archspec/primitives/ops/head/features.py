"""features: pool (cls, mean, eos, map or none), an optional LayerNorm and an optional
projection (the CLIP towers). eos pools each sequence at its end-of-text token and reads the
token ids as a second input; map is the classify head's attention pool without a classifier
(SigLIP's pooler_output)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, dim_value, tokens, vector
from ...base import Cost, Eps, NonNegInt, Op, Params, PositiveInt, RuleError
from ...activations import MlpActivation
from ...counting import linear_flops, linear_params, norm_params
from .classify import check_map_pool, map_pool_cost
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .pooling import Pool, check_pool
from ...decoding import Mixes, register_decoding
from ...decoding import FEATURES as FEATURES_ROLE


class FeaturesParams(Params):
    kind: Literal["features"]
    pool: Pool = "cls"
    eos_id: NonNegInt | None = Field(
        None, description="eos pooling: the end-of-text token id; none: the position of the largest id (CLIP)")
    pool_heads: PositiveInt | None = Field(None, description="pool: map: the attention pool's heads, required there")
    pool_mlp_ratio: float = Field(4.0, gt=0, allow_inf_nan=False,
                                  description="pool: map: the pool's MLP hidden width, int(width * ratio)")
    pool_eps: Eps = Field(1e-6, description="pool: map: the epsilon of the LayerNorm before the pool's MLP")
    pool_act: MlpActivation = Field("gelu", description="pool: map: the pool's MLP activation")
    norm: bool = Field(False, description="LayerNorm after pooling")
    norm_eps: Eps = 1e-5
    project: PositiveInt | None = Field(None, description="project to this width (linear, no bias)")


class FeaturesHeadOp(Op):
    """Pool (cls / mean / eos / map / none), optional LayerNorm, optional projection (CLIP towers)."""

    primitive = "head"
    kind = "features"
    Params = FeaturesParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "ids") if p.pool == "eos" else ("x",)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if p.pool != "none":
            check_pool(p.pool, x)
        check_map_pool(p, x.channels)
        if p.pool == "eos":
            ids = inputs[1]
            if ids.layout != "ids":
                raise RuleError(f"eos pooling reads token ids as its second input, got {ids.layout_name()}",
                                field="from")
            if ids.length != x.length:
                raise RuleError(f"{ids.length} token ids for {x.length} tokens", field="from")
            check_eos_in_vocabulary(p, ctx)
        width = p.project or x.channels
        if p.pool == "none":
            return tokens(x.length, width, x.grid, x.prefix, x.origin)  # [B, N, C] -> [B, N, width]
        return vector(width)  # [B, N, C] -> [B, width]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        width = x.channels
        rows = 1 if p.pool != "none" else dim_value(x.length)
        params = norm_params(width) if p.norm else 0
        flops = 0
        if p.project:
            params += linear_params(width, p.project, bias=False)
            flops = linear_flops(rows, width, p.project)
        if p.pool == "map":
            pool = map_pool_cost(p, width, dim_value(x.length) - x.prefix)
            params, flops = params + pool.params, flops + pool.flops
        return Cost(params, flops)


def check_eos_in_vocabulary(p, ctx) -> None:
    """eos_id within the values the readers of the same token ids take (an embed's vocabulary):
    one beyond them is never found, and every sequence would pool its first token without a word."""
    if p.eos_id is None or not hasattr(ctx, "reader_bounds"):
        return
    for reader, vocab in ctx.reader_bounds(ctx.node.inputs[1]):
        if isinstance(vocab, int) and p.eos_id >= vocab:
            raise RuleError(f"eos_id {p.eos_id} is outside the vocabulary of '{reader}' ({vocab} tokens, ids 0 .. "
                            f"{vocab - 1}), which reads the same ids: no sequence holds it, and each would pool "
                            f"its first token", field="eos_id",
                            hint=f"the end-of-text token's id, below {vocab}; leave eos_id out to pool at the "
                                 "largest id (CLIP's legacy eos_token_id 2)")


FEATURES = register(FeaturesHeadOp())
READS.register(FEATURES, FLOAT_FIRST)
register_decoding(FEATURES, Mixes("a features head pools the tokens"), FEATURES_ROLE)
