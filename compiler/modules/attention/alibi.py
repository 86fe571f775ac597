"""attention kind=alibi (torch): causal attention plus ALiBi's per-head linear distance biases."""

from __future__ import annotations

import math

import torch

from archspec.primitives.ops.attention.alibi import ALIBI

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .common import CachedAttention
from .sequence import SelfAttention, make_sequence_attention


def alibi_slopes(heads: int) -> list[float]:
    """The paper's slopes: 2^(-8/n), 2^(-16/n), ..., 2^(-8) for n a power of two; otherwise
    those of the power of two below, then every other slope of the power of two above."""
    def powers(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(heads).is_integer():
        return powers(heads)
    below = 2 ** math.floor(math.log2(heads))
    return powers(below) + powers(2 * below)[0::2][: heads - below]


class AlibiAttention(CachedAttention, SelfAttention):
    """Token i attends to tokens 0..i, each score lowered by slope_h * (i - j)."""

    def __init__(self, dim, heads, **kwargs):
        super().__init__(dim, heads, **kwargs)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(heads)).view(heads, 1, 1), persistent=False)

    def mask(self, q_len, k_len, padding, dtype, device):
        i = torch.arange(q_len, device=device)[:, None]
        j = torch.arange(k_len, device=device)[None, :]
        bias = -(self.slopes * (i - j).to(self.slopes.dtype)).to(dtype)  # [h, L, L]
        hidden = j > i  # [L, L]: later keys are hidden
        if padding is not None:
            hidden = hidden | (padding == 0)[:, None, None, :]  # [B, 1, L, L]
        return bias.masked_fill(hidden, torch.finfo(dtype).min), False

    def cached_bias(self, query_positions, key_positions, dtype):
        """While generate() decodes: the biases [B, h, N, M] of queries and keys at these positions
        ([B, N], [B, M]: Hugging Face's, from the attention mask, so a left-padded row is biased
        as it would be alone), added to the cache's mask."""
        distance = query_positions[:, None, :, None] - key_positions[:, None, None, :]  # [B, 1, N, M]
        return -(self.slopes * distance.to(self.slopes.dtype)).to(dtype)  # [B, h, N, M]


@lowering(ALIBI)
def lower(p, inputs, ctx):
    return make_sequence_attention(AlibiAttention, ALIBI, p, inputs)


register_facts(ALIBI, grid=KEEPS, classifier=None, resample=None)
