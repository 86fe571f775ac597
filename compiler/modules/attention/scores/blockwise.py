"""score part blockwise (torch): a key the kind's mask hides is seen where the query and the key carry
one block id, 0 or more (Hugging Face's masking_utils.blockwise_overlay, or-ed with the causal
mask); AttentionKernel.hides (kernel.py) takes it out of the kind's mask, for SDPA's additive mask,
the written-out attention and flex_attention alike."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.attention.scores.blockwise import BLOCKWISE

from ...common import make
from .base import score_module


class Blockwise(nn.Module):
    def extra_repr(self) -> str:
        return "a hidden key seen where its block id is the query's (0 or more)"

    def sees(self, query, key, tensors, batch=None):
        """True where the query and the key are of one block. `tensors`: the parts' tensors (this
        part's block ids [B, L] alone). At slot indices `query` [N, 1] and `key` [1, M] ->
        [B, 1, N, M]; with `batch` (flex_attention's mask_mod: one row's indices) -> their shape."""
        ids = tensors[0]  # [B, L]
        if batch is not None:
            group = ids[batch, query]
            return (group == ids[batch, key]) & (group >= 0)
        queries = ids[:, query.reshape(-1)][:, None, :, None]  # [B, L] -> [B, 1, N, 1]
        keys = ids[:, key.reshape(-1)][:, None, None, :]  # [B, L] -> [B, 1, 1, M]
        return (queries == keys) & (queries >= 0)  # [B, 1, N, M]


@score_module(BLOCKWISE)
def make_blockwise(p, site):
    return make(Blockwise)
