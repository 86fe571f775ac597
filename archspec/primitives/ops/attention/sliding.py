"""sliding: causal self-attention inside a sliding window: token i attends to tokens
i - window + 1 .. i (Mistral's sliding-window attention)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import Sym, TensorType
from ...base import PositiveInt
from ...registry import register
from .sequence import SequenceAttentionOp, SequenceParams, check_sequence, longrope_refill, reads_padding_mask
from .sequence import Projections, external_cache_entry, projections_field
from ...decoding import SelfCache, register_decoding
from .scores.base import unless_a_part_refuses


class SlidingParams(SequenceParams):
    kind: Literal["sliding"]
    projections: Projections = projections_field()
    window: PositiveInt = Field(description="how many tokens each token sees: itself and window - 1 before it")
    over_grid: bool = Field(False, description="allow a causal order over tokens on a grid (image patches)")


class SlidingWindowAttentionOp(SequenceAttentionOp):
    """Causal attention limited to the last `window` tokens (its FLOPs count every key, as the
    fused kernel computes the scores the mask then hides)."""

    kind = "sliding"
    hides_keys = True  # later keys (blockwise shows some of them again)
    Params = SlidingParams
    also_called = {"local": "GPT-Neo's local attention (a causal window)", "swa": "sliding-window attention",
                   "sliding_window": "a sliding window", "sliding_attention": "Hugging Face's layer_types"}

    def check(self, p, inputs: list[TensorType]) -> None:
        check_sequence(inputs[0], self.kind, p)
        super().check(p, inputs)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        out = super().shape(p, inputs, ctx)
        length = inputs[0].length
        longest = length.hi if isinstance(length, Sym) else length
        if p.window >= longest:  # the GPT-Neo trial's window 100 over 64 tokens passed without a word
            ctx.warn(f"window {p.window} covers every token of sequences up to {longest}: this layer is causal "
                     "attention over all earlier tokens", field="window",
                     hint=f"a window below {longest} limits what each token sees")
        return out


def sliding_window(p) -> int:
    """The tokens a sliding layer keeps in its cache: its window."""
    return p.window


SLIDING = register(SlidingWindowAttentionOp())
register_decoding(SLIDING, unless_a_part_refuses(SelfCache(window=sliding_window, key_padding=reads_padding_mask,
                                                                 refill=longrope_refill,
                                                                 entry_of_types=external_cache_entry)))
