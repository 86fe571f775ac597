"""head kind=features (torch): pool (cls / mean / eos / map / none), optional LayerNorm, optional
projection (the CLIP towers)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.head.features import FEATURES

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make, trunc_normal_linears
from .map_pool import MapPool, map_pool_args
from .pooling import pool_tokens


class FeaturesHead(nn.Module):
    """Pool (cls / mean / eos / map / none), optional LayerNorm, optional projection (CLIP towers)."""

    def __init__(self, dim, pool="cls", prefix=0, eos_id=None, norm_eps=None, project=None, map_pool=None):
        super().__init__()
        self.pool, self.prefix, self.eos_id = pool, prefix, eos_id
        # pool "map": the classify head's attention pool, from map_pool = (heads, hidden, eps, act)
        self.attn_pool = MapPool(dim, *map_pool) if map_pool is not None else None
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm_eps is not None else None
        self.proj = nn.Linear(dim, project, bias=False) if project else None
        trunc_normal_linears(self)

    def forward(self, x, ids=None):
        if self.pool == "eos":
            if self.eos_id is None:  # CLIP: the end-of-text token has the largest id
                position = ids.argmax(dim=-1)
            else:
                position = (ids == self.eos_id).int().argmax(dim=-1)
            x = x[torch.arange(x.shape[0], device=x.device), position]  # [B, L, C] -> [B, C]
        elif self.attn_pool is not None:
            x = self.attn_pool(x[:, self.prefix:])  # [B, N, C] -> [B, C], class tokens left out (timm's)
        elif self.pool != "none":
            x = pool_tokens(x, self.pool, self.prefix)
        if self.norm is not None:
            x = self.norm(x)
        if self.proj is not None:
            x = self.proj(x)
        return x


@lowering(FEATURES)
def lower(p, inputs, ctx):
    x = inputs[0]
    extra = {}
    if p.pool == "map":  # model.py as before without it
        extra["map_pool"] = map_pool_args(p, x.channels)
    return make(FeaturesHead, dim=x.channels, pool=p.pool, prefix=x.prefix, eos_id=p.eos_id,
                norm_eps=p.norm_eps if p.norm else None, project=p.project, **extra)


register_facts(FEATURES, grid=KEEPS, classifier=None, resample=None)
