"""relative_bias (torch): T5's bucketed relative position bias [1, heads, N, M].

The bucket of each distance key - query depends on the distance only, so it is computed once,
at construction, with T5's own formula (`relative_buckets`, Mesh TensorFlow's
`_relative_position_bucket` as Hugging Face writes it, float32 logarithms included) for every
distance -R..R the lengths allow (R at most 2 x max_distance: by then each side's last bucket
is reached, and longer distances are clamped to it). The forward pass only indexes: distances
from two aranges, their buckets from that buffer, the biases from the table. Integer indexing
exports with symbolic lengths and a dynamic batch, and TensorRT converts it without a
logarithm that could round a distance into the neighbouring bucket.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from archspec.core.types import dim_value
from archspec.primitives.ops.relative_bias import RELATIVE_BIAS, reach

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


def relative_buckets(relative, bidirectional, buckets, max_distance):
    """T5's bucket of each relative position (key - query), an int64 tensor of `relative`'s shape."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        bucket = bucket + (relative > 0).long() * buckets  # keys after the query: the upper half
        distance = relative.abs()
    else:
        distance = -torch.min(relative, torch.zeros_like(relative))  # keys after the query: distance 0
    exact = buckets // 2
    scaled = torch.log(distance.float() / exact) / math.log(max_distance / exact) * (buckets - exact)
    wide = torch.clamp(exact + scaled.long(), max=buckets - 1)  # logarithmic buckets, the last one open-ended
    return bucket + torch.where(distance < exact, distance, wide)


class RelativeBias(nn.Module):
    """A learned bias per head and distance bucket, spread over the query x key positions."""

    def __init__(self, heads, buckets=32, max_distance=128, bidirectional=True, reach=256):
        super().__init__()
        self.reach = reach
        self.table = nn.Parameter(torch.zeros(buckets, heads))  # [buckets, h]
        nn.init.normal_(self.table, std=0.02)
        distances = torch.arange(-reach, reach + 1)  # [2R + 1]
        self.register_buffer("bucket", relative_buckets(distances, bidirectional, buckets, max_distance),
                             persistent=False)  # [2R + 1] int64

    def forward(self, x, keys=None, cache=None):
        """`cache`: generate's decode cache (compiler/generate/cache.py), handed to a bias of the
        decoder's self-attention: the queries are then its current slots, the keys every slot so far."""
        q_len = x.shape[1]
        k_len = q_len if keys is None else keys.shape[1]
        first = 0
        if cache is not None and keys is None:  # the new tokens over every token so far
            first, k_len = cache.state.start, cache.state.end
        queries = torch.arange(first, first + q_len, device=x.device).unsqueeze(1)  # [N, 1]
        memory = torch.arange(k_len, device=x.device).unsqueeze(0)  # [1, M]
        distance = (memory - queries).clamp(-self.reach, self.reach) + self.reach  # [N, M], 0..2R
        per_distance = self.table[self.bucket]  # [2R + 1, h]
        bias = per_distance[distance]  # [N, M, h]
        return bias.permute(2, 0, 1).unsqueeze(0)  # [1, h, N, M]


@lowering(RELATIVE_BIAS)
def lower(p, inputs, ctx):
    longest = max(dim_value(inputs[0].length), dim_value(inputs[-1].length))
    return make(RelativeBias, heads=p.heads, buckets=p.buckets, max_distance=p.max_distance,
                bidirectional=p.bidirectional, reach=reach(p, longest))


register_facts(RELATIVE_BIAS, grid=KEEPS, classifier=None, resample=None)  # the output is a tensor, no grid
