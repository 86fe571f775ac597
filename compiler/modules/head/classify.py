"""head kind=classify (torch): pool (the class token, the grid's mean, or the attention pool of
map_pool.py), optional LayerNorm, linear to classes (timm ClassifierHead)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.head.classify import CLASSIFY

from ...facts import KEEPS, Classifier, register_facts
from ...lowering_rules import lowering
from ..activations import activation
from ..common import Linear, make, trunc_normal_linears
from .map_pool import MapPool, map_pool_args
from .pooling import pool_tokens


class PreLogits(nn.Module):
    """timm NormMlpClassifierHead's hidden layer: fc, then its activation (tanh)."""

    def __init__(self, dim, hidden, act):
        super().__init__()
        self.fc = Linear(dim, hidden)
        self.act = activation(act)

    def forward(self, x):
        return self.act(self.fc(x))  # [B, C] -> [B, hidden]


class ClassifierHead(nn.Module):
    def __init__(self, dim, classes, pool="mean", prefix=0, norm_eps=None, bias=True, map_pool=None, hidden=None):
        super().__init__()
        self.pool, self.prefix = pool, prefix
        # pool "map": timm's attn_pool, from map_pool = (heads, hidden, eps, act)
        self.attn_pool = MapPool(dim, *map_pool) if map_pool is not None else None
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm_eps is not None else None
        if hidden is not None:  # (width, act): model.py as before without it
            self.pre_logits = PreLogits(dim, *hidden)
        self.fc = Linear(hidden[0] if hidden is not None else dim, classes, bias=bias)
        trunc_normal_linears(self)

    def forward(self, x):
        return self.fc(pooled(self, x))  # [B, N, C] -> [B, classes]


@lowering(CLASSIFY)
def lower(p, inputs, ctx):
    x = inputs[0]
    map_pool = None
    if p.pool == "map":
        map_pool = map_pool_args(p, x.channels)
    hidden = {"hidden": (p.hidden, p.hidden_act)} if p.hidden is not None else {}  # model.py as before without it
    return make(ClassifierHead, dim=x.channels, classes=p.classes, pool=p.pool, prefix=x.prefix,
                norm_eps=p.norm_eps if p.norm else None, bias=p.bias, map_pool=map_pool, **hidden)


def pooled(head, x):
    """What the classifier layer reads: the pooled tokens, normed (timm's pre_logits)."""
    if head.attn_pool is not None:
        x = head.attn_pool(x[:, head.prefix:])  # [B, N, C] -> [B, C], class tokens left out (timm's)
    else:
        x = pool_tokens(x, head.pool, head.prefix)  # [B, N, C] -> [B, C]
    x = head.norm(x) if head.norm is not None else x
    pre_logits = getattr(head, "pre_logits", None)
    return pre_logits(x) if pre_logits is not None else x  # [B, C] -> [B, hidden]


register_facts(CLASSIFY, grid=KEEPS, classifier=Classifier(layers=("fc",), pre_logits=pooled), resample=None)
