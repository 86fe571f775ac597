"""cross: queries from this stream, keys and values from another node, `memory`
(nn.Transformer decoder)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ....core.types import TensorType, dim_value
from ...base import RuleError
from ...registry import register
from .sequence import SequenceAttentionOp, SequenceParams
from ...decoding import CrossCache, register_decoding


class CrossParams(SequenceParams):
    kind: Literal["cross"]


class CrossAttentionOp(SequenceAttentionOp):
    """Queries from this stream, keys and values from `memory` (nn.Transformer decoder)."""

    kind = "cross"
    Params = CrossParams

    def streams(self, p) -> tuple[str, ...]:
        return ("x", "memory")

    def check(self, p, inputs: list[TensorType]) -> None:
        x, memory = inputs[0], inputs[1]
        if memory.layout != "tokens":
            raise RuleError(f"cross attention's memory must be tokens, got {memory.layout_name()}", field="from")
        if memory.channels != x.channels:
            raise RuleError(f"memory width {memory.channels} differs from the query width {x.channels}",
                            hint="project the memory to the same width first", field="from")
        if p.rope_theta is not None:
            raise RuleError("rotary embeddings apply to self-attention, where queries and keys share positions",
                            field="rope_theta")
        super().check(p, inputs)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        """The query stream's shape, with the memory's batch: a param's queries (batch 1, a
        learned probe as SigLIP's attention pool) are asked of every sample's memory."""
        out = super().shape(p, inputs, ctx)
        if out.shape[0] != 1:
            return out
        return replace(out, shape=(inputs[1].shape[0],) + out.shape[1:])  # [1, N, C] -> [B, N, C]

    def keys(self, p, inputs: list[TensorType]) -> int:
        return dim_value(inputs[1].length)


CROSS = register(CrossAttentionOp())
register_decoding(CROSS, CrossCache())
