"""head: what a model ends with.

classify     pool (cls token or mean of the grid tokens), optional LayerNorm, linear to classes
lm           a linear map of every token to vocabulary logits, optionally tied to an embed table
features     pool (cls, mean, eos, or none), optional LayerNorm, optional projection (CLIP towers);
             eos pools each sequence at its end-of-text token and reads the token ids as a 2nd input
contrastive  CLIP: normalise image and text features, scaled cosine similarity -> [B, B] logits
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from pydantic import Field

from ..registry import (Cost, Eps, NonNegInt, Params, PositiveInt, Primitive, RuleError, linear_flops,
                        linear_params, norm_params, register)
from ..types import TensorType, dim_value, matrix, tokens, vector
from .embed import tied_table

Pool = Literal["cls", "mean", "eos", "none"]


class ClassifyHead(Params):
    kind: Literal["classify"]
    classes: PositiveInt
    pool: Literal["cls", "mean"] = "mean"
    norm: bool = Field(False, description="LayerNorm after pooling (timm's fc_norm)")
    norm_eps: Eps = 1e-5
    bias: bool = True


class LmHead(Params):
    kind: Literal["lm"]
    vocab: PositiveInt | None = Field(None, description="vocabulary size (taken from `tie` when tied)")
    tie: str | None = Field(None, description="use this embed node's table as the output weights")
    bias: bool = False


class FeaturesHead(Params):
    kind: Literal["features"]
    pool: Pool = "cls"
    eos_id: NonNegInt | None = Field(
        None, description="eos pooling: the end-of-text token id; none: the position of the largest id (CLIP)")
    norm: bool = Field(False, description="LayerNorm after pooling")
    norm_eps: Eps = 1e-5
    project: PositiveInt | None = Field(None, description="project to this width (linear, no bias)")


class ContrastiveHead(Params):
    kind: Literal["contrastive"]
    logit_scale: float = Field(math.log(1 / 0.07), description="initial log of the logit scale")


HeadParams = Annotated[Union[ClassifyHead, LmHead, FeaturesHead, ContrastiveHead], Field(discriminator="kind")]


def check_pool(pool: str, x: TensorType) -> None:
    if x.layout != "tokens":
        raise RuleError(f"pooling reads tokens, got {x.layout_name()}")
    if pool == "cls" and not x.prefix:
        raise RuleError("pool: cls needs a class token, and these tokens have none", field="pool",
                        hint="use pool: mean, or patchify with cls_token: true")
    if pool == "mean" and x.prefix and not x.grid:
        raise RuleError("pool: mean over tokens without a grid cannot leave out class tokens", field="pool")


def lm_vocab(p: LmHead, width: int, ctx) -> int:
    if p.tie is None:
        if p.vocab is None:
            raise RuleError("an lm head needs `vocab` (or `tie` to an embed table)")
        return p.vocab
    vocab, dim = tied_table(p.tie, ctx)
    if dim != width:
        raise RuleError(f"the tied table ({p.tie}) is {dim} wide but the tokens are {width}", field="tie")
    if p.vocab is not None and p.vocab != vocab:
        raise RuleError(f"vocab {p.vocab} differs from the tied table's {vocab}", field="vocab")
    return vocab


def infer(p, inputs: list[TensorType], ctx) -> TensorType:
    x = inputs[0]
    if p.kind == "classify":
        check_pool(p.pool, x)
        return vector(p.classes)  # [B, N, C] -> [B, classes]
    if p.kind == "lm":
        if x.layout != "tokens":
            raise RuleError(f"an lm head reads tokens, got {x.layout_name()}")
        return tokens(x.length, lm_vocab(p, x.channels, ctx))  # [B, L, C] -> [B, L, vocab]
    if p.kind == "features":
        if p.pool != "none":
            check_pool(p.pool, x)
        if p.pool == "eos":
            ids = inputs[1]
            if ids.layout != "ids":
                raise RuleError(f"eos pooling reads token ids as its second input, got {ids.layout_name()}",
                                field="from")
            if ids.length != x.length:
                raise RuleError(f"{ids.length} token ids for {x.length} tokens", field="from")
        width = p.project or x.channels
        if p.pool == "none":
            return tokens(x.length, width, x.grid, x.prefix, x.trace)  # [B, N, C] -> [B, N, width]
        return vector(width)  # [B, N, C] -> [B, width]
    image, text = inputs
    for name, t in (("image", image), ("text", text)):
        if t.layout != "vector":
            raise RuleError(f"contrastive logits read two feature vectors; the {name} input is {t.layout_name()}",
                            field="from", hint="end each tower with a features head")
    if image.channels != text.channels:
        raise RuleError(f"image features are {image.channels} wide but text features {text.channels}", field="from",
                        hint="project both towers to the same width (features head `project`)")
    return matrix()  # [B, D], [B, D] -> [B, B]


def input_names(p) -> tuple[str, ...]:
    if p.kind == "contrastive":
        return ("image", "text")
    if p.kind == "features" and p.pool == "eos":
        return ("x", "ids")
    return ("x",)


def cost(p, inputs: list[TensorType], out: TensorType) -> Cost:
    x = inputs[0]
    width = x.channels
    if p.kind == "classify":
        params = linear_params(width, p.classes, p.bias) + (norm_params(width) if p.norm else 0)
        return Cost(params, linear_flops(1, width, p.classes))
    if p.kind == "lm":
        vocab = out.channels
        params = 0 if p.tie else linear_params(width, vocab, p.bias)
        params += vocab if (p.tie and p.bias) else 0
        return Cost(params, linear_flops(dim_value(x.length), width, vocab))
    if p.kind == "features":
        rows = 1 if p.pool != "none" else dim_value(x.length)
        params = norm_params(width) if p.norm else 0
        flops = 0
        if p.project:
            params += linear_params(width, p.project, bias=False)
            flops = linear_flops(rows, width, p.project)
        return Cost(params, flops)
    return Cost(1, linear_flops(1, x.channels, 1))  # logit scale; one image-text product per sample


PRIMITIVE = register(Primitive("head", HeadParams, infer, cost, input_names, doc=__doc__))
