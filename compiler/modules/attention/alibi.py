"""attention kind=alibi (torch): causal attention plus ALiBi's per-head linear distance biases."""

from __future__ import annotations

import math

import torch

from archspec.primitives.ops.attention.alibi import ALIBI

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .kernel import AllKeys, later_or_outside
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


class AlibiMask(AllKeys):
    """kind=alibi: token i sees tokens 0..i, each score lowered by slope_h * (i - j)."""

    hides_some = decodes = adds_bias = True

    def __init__(self, heads: int, factor: float = 1.0):
        self.heads, self.factor = heads, factor  # factor: the scores' scale where the biases come before it

    def hides(self, query, key):
        return later_or_outside(query, key)  # later keys are hidden

    def table(self):
        """The heads' slopes [h, 1, 1] (float32; the kernel's buffer, cast with the model)."""
        return (torch.tensor(alibi_slopes(self.heads), dtype=torch.float64) * self.factor).float().view(
            self.heads, 1, 1)  # [h] -> [h, 1, 1]

    def bias(self, query, key, dtype, table=None):
        """-slope_h * (query - key), `table` the slopes: [h, N, M] at indices [N, 1] and [1, M]; while
        generate() decodes, [B, h, N, M] at the positions [B, 1, N, 1] and [B, 1, 1, M] (Hugging
        Face's, from the attention mask, so a left-padded row is biased as it would be alone)."""
        return -(table * (query - key).to(table.dtype)).to(dtype)  # [h, N, M] or [B, h, N, M]


@lowering(ALIBI)
def lower(p, inputs, ctx):
    return make_sequence_attention(SelfAttention, ALIBI, p, inputs, keys=AlibiMask(p.heads, slope_factor(p, inputs)))


def slope_factor(p, inputs) -> float:
    """1, or with `alibi_at: before_scale` the scores' scale (scale, else 1/sqrt(head_dim)), which
    then scales the biases too: (q·k^T + b) * s = q·k^T * s + b * s (Falcon)."""
    if p.alibi_at == "after_scale":
        return 1.0
    return p.scale if p.scale is not None else ALIBI.head_dim(p, inputs[0].channels) ** -0.5


register_facts(ALIBI, grid=KEEPS, classifier=None, resample=None)
