"""causal: self-attention where token i attends to tokens 0..i (nn.Transformer decoder, CLIP
text, GPT-2, Llama)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType
from ...registry import register
from .sequence import SequenceAttentionOp, SequenceParams, check_sequence, longrope_refill, reads_padding_mask
from .sequence import Projections, external_cache_entry, projections_field
from ...decoding import SelfCache, register_decoding
from .scores.base import unless_a_part_refuses


class CausalParams(SequenceParams):
    kind: Literal["causal"]
    projections: Projections = projections_field()
    over_grid: bool = Field(False, description="allow a causal order over tokens on a grid (image patches)")


class CausalAttentionOp(SequenceAttentionOp):
    """Each token attends to itself and earlier tokens (nn.Transformer decoder, CLIP text)."""

    kind = "causal"
    hides_keys = True  # later keys (blockwise shows some of them again)
    Params = CausalParams
    also_called = {"decoder": "a decoder's self-attention", "masked": "masked self-attention",
                   "autoregressive": "autoregressive attention", "full_attention": "Hugging Face's layer_types "
                   "for a decoder's layers without a window"}

    def check(self, p, inputs: list[TensorType]) -> None:
        check_sequence(inputs[0], self.kind, p)
        super().check(p, inputs)


CAUSAL = register(CausalAttentionOp())
register_decoding(CAUSAL, unless_a_part_refuses(SelfCache(key_padding=reads_padding_mask, refill=longrope_refill,
                                                           entry_of_types=external_cache_entry)))
