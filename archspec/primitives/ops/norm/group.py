"""norm kind=group: a GroupNorm (Wu and He, 2018; torch's nn.GroupNorm), the channels split into
`groups` groups, each normalised over its channels and every place of the sample (an image's
pixels, all the tokens), then a learned weight and bias per channel. One group normalises the
whole sample: timm's GroupNorm1 (PoolFormer), Moonshine's audio front-end after its first conv.
It reads every token of the sample, so a spec that generates through a cache cannot hold it
on the target side."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, batch_factor
from ...base import Cost, Eps, Op, Params, PositiveInt, RuleError
from ...counting import norm_params
from ...decoding import Mixes, register_decoding
from ...dtypes import FLOAT_FIRST, READS
from ...registry import register


class GroupNormParams(Params):
    kind: Literal["group"]
    groups: PositiveInt = Field(description="groups of channels, each normalised on its own (1: the whole sample); "
                                            "must divide the channels")
    eps: Eps = 1e-5


class GroupNorm(Op):
    """A GroupNorm over an image's or tokens' channels, statistics per sample and group."""

    primitive = "norm"
    kind = "group"
    Params = GroupNormParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        if x.layout not in ("image", "tokens"):
            raise RuleError(f"a group norm needs an image or tokens, got {x.layout_name()}",
                            hint="its statistics run over a sample's places: an image's pixels or its tokens")
        if x.channels % p.groups:
            fits = ", ".join(str(g) for g in range(1, x.channels + 1) if x.channels % g == 0 and g <= 64)
            raise RuleError(f"{p.groups} groups do not divide the {x.channels} channels", field="groups",
                            hint=f"groups that divide {x.channels}: {fits}")
        folded = batch_factor(x.shape[0])
        if folded is not None and folded > 1:  # the MobileViT v2 trial: 0.54 off timm's GroupNorm1, no word
            ctx.warn(f"a group norm over the batch {x.shape[0]}, with {folded} rows of each sample folded into it: its "
                     "statistics run over each row, not over the whole sample", field="kind",
                     hint="unfold the axes out of the batch first where the reference normalises the whole sample "
                          "(timm's GroupNorm1 over [C, P, N]), then fold them again")
        return x  # same shape

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(params=norm_params(out.channels), flops=0)


GROUP = register(GroupNorm())
READS.register(GROUP, FLOAT_FIRST)
register_decoding(GROUP, Mixes("a group norm's statistics run over every token of the sample"))
