"""channel: DaViT's channel group attention (Ding et al., "DaViT: Dual Attention Vision
Transformers", ECCV 2022; timm ChannelAttention). Attention between the channels of each head
instead of between tokens: per head, the [d, d] weights softmax(k^T v / sqrt(d)), summed over
every token, mix q's channels (out = q A^T), then the projection. Its cost grows with the
tokens linearly, never as N x N. Parameters: `qkv` (width x 3 width) and `proj`, as timm's.

    - {id: attn, attention: {kind: channel, heads: 3}}

`kind: xca` (XCiT) is the same product with q and k L2-normalised and a learned temperature;
both run as one fused attention kernel over the transposed heads.
"""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType, dim_value
from ...base import Cost
from ...counting import FLOAT_BYTES, attention_flops
from ...decoding import Mixes, register_decoding
from ...registry import register
from .common import AttentionOp, AttentionParams


class ChannelParams(AttentionParams):
    kind: Literal["channel"]


class ChannelAttentionOp(AttentionOp):
    """Each head's channels attend to its channels, the weights summed over every token."""

    kind = "channel"
    Params = ChannelParams

    def head_width(self, p, inputs: list[TensorType]) -> int:
        return inputs[0].channels // p.heads

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        """Per head the [d, d] products over every token: 4 * N * d * width (d the head's width)."""
        x = inputs[0]
        return Cost(0, attention_flops(dim_value(x.length), self.head_width(p, inputs), x.channels))

    def score_bytes(self, p, inputs: list[TensorType]) -> int:
        """heads x d x d weights, float32, per sample: no N x N matrix."""
        return FLOAT_BYTES * p.heads * self.head_width(p, inputs) ** 2


WHY = "it sums over every token, later ones included (only causal, sliding and alibi attention are cached)"

CHANNEL = register(ChannelAttentionOp())
register_decoding(CHANNEL, Mixes(f"channel attention's weights: {WHY}"))
