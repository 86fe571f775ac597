"""classify: pool (the class token, the mean of the grid tokens, or timm's attention pool over a
learned latent query: SigLIP's `map`), an optional LayerNorm, an optional hidden layer (a linear
and its activation: timm's NormMlpClassifierHead pre_logits), a linear map to class logits (timm
ClassifierHead; VisionTransformer's attn_pool + head)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType, dim_value, vector
from ...activations import Function, MlpActivation, learned_params
from ...base import MAX_SIZE, Cost, Eps, Op, Params, PositiveInt, RuleError
from ...counting import attention_flops, hidden_width, linear_flops, linear_params, norm_params
from ...registry import register
from ...dtypes import READS, FLOAT_FIRST
from .pooling import check_pool
from ...decoding import CLASSES, Mixes, register_decoding

MAP_OPTIONS = ("pool_heads", "pool_mlp_ratio", "pool_eps", "pool_act")


class ClassifyParams(Params):
    kind: Literal["classify"]
    classes: PositiveInt
    pool: Literal["cls", "mean", "map"] = Field(
        "mean", description="cls: the class token; mean: the grid tokens' mean; map: timm's AttentionPoolLatent "
                            "(a learned latent query attends over the tokens, class tokens left out, then a "
                            "pre-norm MLP with a residual; SigLIP)")
    pool_heads: PositiveInt | None = Field(None, description="pool: map: the attention pool's heads, required "
                                                             "there (timm's SigLIP: the ViT's)")
    pool_mlp_ratio: float = Field(4.0, gt=0, allow_inf_nan=False,
                                  description="pool: map: the pool's MLP hidden width, int(width * ratio)")
    pool_eps: Eps = Field(1e-6, description="pool: map: the epsilon of the LayerNorm before the pool's MLP")
    pool_act: MlpActivation = Field("gelu", description="pool: map: the pool's MLP activation")
    norm: bool = Field(False, description="LayerNorm after pooling (timm's fc_norm)")
    norm_eps: Eps = 1e-5
    hidden: PositiveInt | None = Field(None, description="a hidden layer before the classes: a linear of this width "
                                                         "and `hidden_act` (timm's NormMlpClassifierHead hidden_size: "
                                                         "MaxViT's tf heads; state dict `pre_logits.fc`)")
    hidden_act: Function = Field("tanh", description="hidden: its activation (timm's: tanh)")
    bias: bool = True
    features_format: Literal["auto", "NHWC", "NCHW", "NLC"] = Field(
        "auto", description="what the built model's forward_features gives by default, as timm's model of the "
                            "family does: NHWC (Swin), NCHW (PVT v2, GC ViT, ConvNeXt), NLC (the tokens, ViT); auto: "
                            "NHWC where the stages shrink a token grid, NLC otherwise")


class ClassifyHead(Op):
    """Pool (cls token, mean of the grid tokens, or attention pool), optional LayerNorm, linear to classes."""

    primitive = "head"
    kind = "classify"
    Params = ClassifyParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        check_pool(p.pool, inputs[0])
        check_map_pool(p, inputs[0].channels)
        if p.hidden is None and "hidden_act" in p.model_fields_set:
            raise RuleError("hidden_act goes with hidden", field="hidden_act",
                            hint=Remedy("give `hidden: <width>`, or drop hidden_act"))
        x = inputs[0]
        if p.features_format in ("NHWC", "NCHW") and (x.grid is None or x.prefix):
            why = "class tokens, which have no place on the grid" if x.prefix else "no token grid"
            raise RuleError(f"features_format {p.features_format} is an image, and the tokens the head reads have "
                            f"{why}", field="features_format", hint="features_format: NLC (the tokens), or auto")
        return vector(p.classes)  # [B, N, C] -> [B, classes]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        width = x.channels
        params = norm_params(width) if p.norm else 0
        flops = 0
        if p.hidden is not None:  # the pre-logits layer: C -> hidden
            params += linear_params(width, p.hidden) + learned_params(p.hidden_act)
            flops += linear_flops(1, width, p.hidden)
            width = p.hidden
        params += linear_params(width, p.classes, p.bias)
        flops += linear_flops(1, width, p.classes)
        if p.pool == "map":
            pool = map_pool_cost(p, x.channels, dim_value(x.length) - x.prefix)  # over the tokens' width
            params, flops = params + pool.params, flops + pool.flops
        return Cost(params, flops)


def check_map_pool(p, width: int) -> None:
    """The attention pool's options: given only with pool: map, its heads dividing the width."""
    if p.pool != "map":
        for name in MAP_OPTIONS:
            if name in p.model_fields_set:
                raise RuleError(f"{name} goes with pool: map", field=name, hint=Remedy("give `pool: map`, or drop it"))
        return
    if p.pool_heads is None:
        raise RuleError("pool: map needs pool_heads, the attention pool's heads", field="pool",
                        hint=Remedy("timm's SigLIP ViTs use the trunk's heads: pool_heads: ${heads}"))
    if width % p.pool_heads:
        raise RuleError(f"pool_heads {p.pool_heads} does not divide the width {width}", field="pool_heads")
    if width * p.pool_mlp_ratio > MAX_SIZE or int(width * p.pool_mlp_ratio) < 1:
        raise RuleError(f"pool_mlp_ratio {p.pool_mlp_ratio} gives a hidden layer of "
                        f"{width * p.pool_mlp_ratio:.4g} for width {width}", field="pool_mlp_ratio")


def map_pool_cost(p, width: int, tokens: int) -> Cost:
    """The latent [1, 1, width]; q over it, k and v over the tokens, proj, LayerNorm, MLP."""
    hidden = hidden_width(width, None, p.pool_mlp_ratio)
    params = width + linear_params(width, width) + linear_params(width, 2 * width) + linear_params(width, width)
    params += norm_params(width) + linear_params(width, hidden) + linear_params(hidden, width) + learned_params(p.pool_act)
    flops = linear_flops(1, width, width) + linear_flops(tokens, width, 2 * width)  # q; k and v
    flops += attention_flops(1, tokens, width) + linear_flops(1, width, width)  # one query; proj
    flops += linear_flops(1, width, hidden) + linear_flops(1, hidden, width)  # the MLP
    return Cost(params, flops)


CLASSIFY = register(ClassifyHead())
READS.register(CLASSIFY, FLOAT_FIRST)
register_decoding(CLASSIFY, Mixes("a classifier pools the tokens"), CLASSES)
