"""alibi: causal self-attention with ALiBi's linear biases instead of position embeddings
(Press et al., "Train Short, Test Long", ICLR 2022; BLOOM, MPT): head h adds -m_h * (i - j)
to the score of query i and key j <= i, with slopes m_h a geometric sequence (2^(-8/n),
2^(-16/n), ... for n heads, interleaved as the paper does when n is not a power of two)."""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType
from ...base import RuleError
from ...registry import register
from .sequence import SequenceAttentionOp, SequenceParams, check_sequence, external_cache_entry, reads_padding_mask
from .sequence import Projections, projections_field
from ...decoding import SelfCache, register_decoding
from .scores.base import unless_a_part_refuses


class AlibiParams(SequenceParams):
    kind: Literal["alibi"]
    projections: Projections = projections_field()
    over_grid: bool = Field(False, description="allow a causal order over tokens on a grid (image patches)")


class AlibiAttentionOp(SequenceAttentionOp):
    """Causal attention with a per-head linear penalty on the distance to each earlier key."""

    kind = "alibi"
    hides_keys = True  # later keys (blockwise shows some of them again)
    Params = AlibiParams

    def check(self, p, inputs: list[TensorType]) -> None:
        check_sequence(inputs[0], self.kind, p)
        if p.rope_theta is not None:
            raise RuleError("ALiBi's biases take the place of rotary embeddings: give one of them", field="rope_theta")
        super().check(p, inputs)


ALIBI = register(AlibiAttentionOp())
register_decoding(ALIBI, unless_a_part_refuses(SelfCache(key_padding=reads_padding_mask,
                                                          entry_of_types=external_cache_entry)))
