"""norm kind=batch (torch): nn.BatchNorm2d over an image's channels, nn.BatchNorm1d over a
feature vector's, and over tokens' channels with the tokens as the batch's other axis (as
timm's LeViT flattens them), so the state dict holds torch's own names (weight, bias,
running_mean, running_var, num_batches_tracked)."""

from __future__ import annotations

from archspec.primitives.ops.norm.batch import BATCH

import torch.nn as nn

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d over the channels of tokens [B, N, C]: statistics over B and N."""

    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)  # [B, N, C] -> [B, C, N] -> [B, N, C]


@lowering(BATCH)
def lower(p, inputs, ctx):
    x = inputs[0]
    kind = {"image": nn.BatchNorm2d, "vector": nn.BatchNorm1d, "tokens": TokenBatchNorm}[x.layout]
    return make(kind, num_features=x.channels, eps=p.eps, momentum=p.momentum)


register_facts(BATCH, grid=KEEPS, fusion=None, head=None)
