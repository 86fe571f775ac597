"""alibi: causal self-attention with ALiBi's linear biases instead of position embeddings
(Press et al., "Train Short, Test Long", ICLR 2022; BLOOM, MPT): head h adds -m_h * (i - j)
to the score of query i and key j <= i, with slopes m_h a geometric sequence (2^(-8/n),
2^(-16/n), ... for n heads, interleaved as the paper does when n is not a power of two); with
`alibi_at: before_scale` the biases join q·k^T before the 1/sqrt(d) scaling, so the slopes are
scaled too (Falcon)."""

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
    alibi_at: Literal["after_scale", "before_scale"] = Field(
        "after_scale", description="where the biases are added: to the scaled scores q·k^T * scale (BLOOM, MPT) or "
                                   "to q·k^T before the scaling, which then scales them too (Falcon's alibi: true)")


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
