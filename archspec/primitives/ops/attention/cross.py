"""cross: queries from this stream, keys and values from another node, `memory`
(nn.Transformer decoder)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType, dim_value
from ...base import Cost, PositiveInt, RuleError
from ...counting import linear_flops
from ...registry import register
from .sequence import SequenceAttentionOp, SequenceParams, qk_positions_field
from ...decoding import CrossCache, Mixes, register_decoding
from .scores.base import unless_a_part_refuses


class CrossParams(SequenceParams):
    kind: Literal["cross"]
    kdim: PositiveInt | None = Field(None, description="width of the memory the keys are projected from, when it "
                                                       "differs from the queries' (nn.MultiheadAttention's kdim, "
                                                       "Perceiver's kv_dim); default: the query width")
    vdim: PositiveInt | None = Field(None, description="width of the memory the values are projected from (one "
                                                       "memory gives both: equal to kdim); default: kdim")
    qk_positions: bool = qk_positions_field()


class CrossAttentionOp(SequenceAttentionOp):
    """Queries from this stream, keys and values from `memory` (nn.Transformer decoder)."""

    kind = "cross"
    Params = CrossParams

    def streams(self, p) -> tuple[str, ...]:
        return ("x", "memory")

    def positions(self, p) -> tuple[str, ...]:
        return ("query_positions", "memory_positions") if p.qk_positions else ()

    def check(self, p, inputs: list[TensorType]) -> None:
        x, memory = inputs[0], inputs[1]
        if memory.layout != "tokens":
            raise RuleError(f"cross attention's memory must be tokens, got {memory.layout_name()}", field="from")
        declared = memory_width(p, x.channels)
        if p.kdim is not None and p.vdim is not None and p.kdim != p.vdim:
            raise RuleError(f"kdim {p.kdim} and vdim {p.vdim} differ, and the keys and values come from one memory",
                            field="vdim", hint=Remedy(f"give the memory's width once: `kdim: {p.kdim}`"))
        if memory.channels != declared:
            said = "the query width" if p.kdim is None and p.vdim is None else ("kdim" if p.kdim else "vdim")
            if p.kdim is not None or p.vdim is not None:
                raise RuleError(f"memory width {memory.channels} differs from {said} {declared}",
                                hint=f"set `{said}: {memory.channels}`, the width of the memory `from:` gives",
                                field=said)
            raise RuleError(f"memory width {memory.channels} differs from {said} {declared}: `from:` takes the "
                            f"queries from its first input (width {x.channels}), keys and values from its second "
                            f"(width {memory.channels})",
                            hint=f"if the two are swapped, list the queries first; otherwise project the memory to "
                                 f"the same width, or declare its width with `kdim: {memory.channels}` (keys and "
                                 f"values projected from it, as Perceiver's)",
                            field="from")
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

    def score_site(self, p, inputs: list[TensorType]):
        """As the sequence kinds', the keys a memory's tokens, not the queries' own."""
        return replace(super().score_site(p, inputs), self_attention=False)

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        """As every kind's, with the key/value projection from the memory's width."""
        cost = super().cost(p, inputs, out, ctx)
        width, memory = inputs[0].channels, inputs[1].channels
        if memory == width:
            return cost
        kv = 2 * self.kv_width(p, width)
        params = cost.params + kv * (memory - width)
        keys = self.keys(p, inputs)
        flops = cost.flops + linear_flops(keys, memory, kv) - linear_flops(keys, width, kv)
        return replace(cost, params=params, flops=flops)


def memory_width(p, width: int) -> int:
    """The width the keys and values are projected from: kdim (or vdim), else the query width."""
    return p.kdim or p.vdim or width


def cross_decoding(params):
    """DECODE of cross attention: the memory's keys and values made once, unless a score part
    refuses, or the queries read positions generate does not feed (qk_positions)."""
    if params.qk_positions:
        return Mixes("its queries read positions (qk_positions), which generate does not feed")
    return unless_a_part_refuses(CrossCache())(params)


CROSS = register(CrossAttentionOp())
register_decoding(CROSS, cross_decoding)
