"""local_window: a bidirectional sliding window as a mask part: query i sees the keys j with
|i - j| <= window // 2, before and after it (ModernBERT's local attention layers: Hugging Face's
ModernBertAttention with `local_attention` = window). On global attention it makes the layer
local; with a padding mask both hide their keys. It only hides keys, so the attention stays one
fused SDPA with an additive mask.
"""

from __future__ import annotations

from .....core.declared import Field
from ....base import Params, PositiveInt, RuleError
from ....decoding import Mixes
from .....core.suggestions import Remedy
from ....registry import register
from .base import ScorePart, ScoreSite, register_score_decoding


class LocalWindowParams(Params):
    window: PositiveInt = Field(description="the window's width: each token sees the tokens up to window // 2 "
                                            "before and after it (ModernBERT's local_attention: 128; a window of n "
                                            "each side, T5Gemma's encoder's sliding_window n, is 2n)")


class LocalWindowPart(ScorePart):
    """Hides the keys more than window // 2 places from the query, either side (ModernBERT's
    local attention): a mask, fused SDPA."""

    name = "local_window"
    Params = LocalWindowParams
    explicit = False
    hides_keys = True

    def check(self, p, site: ScoreSite) -> None:
        if not site.masks:
            raise RuleError("local_window hides keys by their distance in a sequence, and this kind of attention "
                            "does not take mask parts", field="scores",
                            hint=Remedy("use it on global attention (or another sequence kind)"))
        if not site.self_attention:
            raise RuleError("local_window hides keys by their distance from the query in one sequence, and cross "
                            "attention's keys are another sequence's", field="scores",
                            hint=Remedy("use it on self-attention (global)"))


LOCAL_WINDOW = register(LocalWindowPart())
register_score_decoding(LOCAL_WINDOW, Mixes(
    "generate builds its cache's mask from the attention's kind alone, and a window of later tokens is no "
    "causal one (on causal attention, kind: sliding with window: window // 2 + 1 is the same layer)"))
