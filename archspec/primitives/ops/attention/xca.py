"""xca: cross-covariance attention (El-Nouby et al., "XCiT: Cross-Covariance Image
Transformers", NeurIPS 2021; timm XCA). Attention between the channels of each head: q and k
are L2-normalised over the tokens (F.normalize), and per head the [d, d] weights
softmax(q^ k^T * temperature), with a learned temperature per head, mix v's channels; then the
projection. Parameters: `qkv` (width x 3 width), `temperature` [heads, 1, 1] (ones at init;
weight-decayed, as timm's create_optimizer_v2 decays it) and `proj`, as timm's.

    - {id: attn, attention: {kind: xca, heads: 4, layer_scale: 1.0, norm_eps: 1.0e-6}}

`kind: channel` (DaViT) is the same product without the normalisation and the temperature,
with the roles k, v -> weights, q -> mixed.
"""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType
from ...base import Cost
from ...decoding import Mixes, register_decoding
from ...registry import register
from .channel import WHY, ChannelAttentionOp
from .common import AttentionParams


class XcaParams(AttentionParams):
    kind: Literal["xca"]


class CrossCovarianceAttentionOp(ChannelAttentionOp):
    """Channel attention over L2-normalised q and k with a learned temperature per head (XCiT)."""

    kind = "xca"
    Params = XcaParams

    def core_cost(self, p, inputs: list[TensorType]) -> Cost:
        """The channel products, and the temperature: one parameter per head."""
        products = super().core_cost(p, inputs)
        return Cost(p.heads, products.flops)


XCA = register(CrossCovarianceAttentionOp())
register_decoding(XCA, Mixes(f"cross-covariance attention's weights: {WHY}"))
