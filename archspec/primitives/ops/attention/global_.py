"""global: multi-head self-attention, every token attends to every token (timm ViT Attention)."""

from __future__ import annotations

from typing import Literal

from ...registry import register
from .common import MergeHeads, merge_heads_field
from .sequence import Projections, SequenceAttentionOp, SequenceParams, projections_field, qk_positions_field
from ...decoding import Mixes, register_decoding


class GlobalParams(SequenceParams):
    kind: Literal["global"]
    projections: Projections = projections_field()
    merge_heads: MergeHeads = merge_heads_field()
    qk_positions: bool = qk_positions_field()


class GlobalAttentionOp(SequenceAttentionOp):
    """All tokens attend to all tokens (timm ViT)."""

    kind = "global"
    Params = GlobalParams
    also_called = {"bidirectional": "bidirectional attention", "encoder": "an encoder's self-attention",
                   "full": "full attention, every token seeing every token (a decoder's is `causal`)",
                   "non_causal": "attention without a causal mask"}
    key_hints = {**SequenceAttentionOp.key_hints,
                 "window": "sliding is causal: a window both ways over a sequence (each token sees up to w // 2 "
                           "before and after it: ModernBERT's local_attention w; T5Gemma's encoder, whose "
                           "sliding_window n sees n each side, is w = 2n) is the score part "
                           "`scores: [{local_window: {window: w}}]`"}


GLOBAL = register(GlobalAttentionOp())
register_decoding(GLOBAL, Mixes("it lets a token see later tokens (only causal, sliding and alibi attention are cached)"))
