"""head kind=classify (torch): pool, optional LayerNorm, linear to classes (timm ClassifierHead)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.head.classify import CLASSIFY

from ...facts import KEEPS, Classifier, register_facts
from ...lowering_rules import lowering
from ..common import Linear, make, trunc_normal_linears
from .pooling import pool_tokens


class ClassifierHead(nn.Module):
    def __init__(self, dim, classes, pool="mean", prefix=0, norm_eps=None, bias=True):
        super().__init__()
        self.pool, self.prefix = pool, prefix
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm_eps is not None else None
        self.fc = Linear(dim, classes, bias=bias)
        trunc_normal_linears(self)

    def forward(self, x):
        x = pool_tokens(x, self.pool, self.prefix)  # [B, N, C] -> [B, C]
        if self.norm is not None:
            x = self.norm(x)
        return self.fc(x)  # -> [B, classes]


@lowering(CLASSIFY)
def lower(p, inputs, ctx):
    x = inputs[0]
    return make(ClassifierHead, dim=x.channels, classes=p.classes, pool=p.pool, prefix=x.prefix,
                norm_eps=p.norm_eps if p.norm else None, bias=p.bias)


def pooled(head: ClassifierHead, x):
    """What the classifier layer reads: the pooled tokens, normed (timm's pre_logits)."""
    x = pool_tokens(x, head.pool, head.prefix)  # [B, N, C] -> [B, C]
    return head.norm(x) if head.norm is not None else x


register_facts(CLASSIFY, grid=KEEPS, classifier=Classifier(layers=("fc",), pre_logits=pooled), resample=None)
