"""softcap: squash the scores into (-cap, cap) with cap · tanh(scores / cap) before the softmax
(Gemma 2's attention logit soft-capping)."""

from __future__ import annotations

from .....core.declared import Field
from ....base import Params
from ....registry import register
from .base import DECODES, ScorePart, register_score_decoding


class SoftcapParams(Params):
    cap: float = Field(50.0, gt=0, allow_inf_nan=False, description="the bound of the scores (Gemma 2: 50)")


class SoftcapPart(ScorePart):
    """scores -> cap · tanh(scores / cap), before the softmax (and before any mask)."""

    name = "softcap"
    Params = SoftcapParams
    changes_scores = True
    explicit = True


SOFTCAP = register(SoftcapPart())
register_score_decoding(SOFTCAP, DECODES)  # elementwise on each score: the cached scores are the same
