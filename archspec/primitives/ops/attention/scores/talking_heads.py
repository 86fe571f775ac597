"""talking_heads: mix the heads' scores with a learned heads x heads map before the softmax, and
the weights with another after it (Shazeer et al. 2020; CaiT, timm TalkingHeadAttn)."""

from __future__ import annotations

from ....base import Cost, Params
from ....decoding import Mixes
from ....registry import register
from .base import ScorePart, ScoreSite, register_score_decoding


class TalkingHeadsParams(Params):
    pass


class TalkingHeadsPart(ScorePart):
    """Scores [B, h, N, M] mixed across heads by a linear map (with bias) before the softmax,
    the weights by another after it."""

    name = "talking_heads"
    Params = TalkingHeadsParams
    changes_scores = True
    explicit = True

    def cost(self, p, site: ScoreSite) -> Cost:
        params = 2 * (site.heads * site.heads + site.heads)  # proj_l and proj_w, weight and bias
        flops = 2 * 2 * site.heads * site.heads * site.queries * site.keys  # two h x h maps per score
        return Cost(params, flops)


TALKING_HEADS = register(TalkingHeadsPart())
register_score_decoding(TALKING_HEADS, Mixes(
    "talking heads mix the weights across heads after the softmax, with a bias, so a key the mask hides (a "
    "later token) gets that bias as its weight: the forward reads later tokens, which a cache never holds"))
