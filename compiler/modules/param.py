"""param (torch): a learned tensor with a leading dimension of 1 (a buffer when not learned; a
parameter without requires_grad when frozen)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.param import PARAM

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class LearnedParam(nn.Module):
    def __init__(self, shape, init="trunc_normal", std=0.02, learned=True, frozen=False, value=None):
        super().__init__()
        if learned:  # frozen: counted among the parameters, never trained
            self.value = nn.Parameter(torch.zeros(1, *shape), requires_grad=not frozen)
        else:  # in the state dict, loaded from checkpoints, never trained
            self.register_buffer("value", torch.zeros(1, *shape))
        if init == "ones":
            nn.init.ones_(self.value)
        elif init == "normal":
            nn.init.normal_(self.value, std=std)
        elif init == "trunc_normal":
            nn.init.trunc_normal_(self.value, std=std)
        elif init == "value":  # every value one number (a LayerScale's 1e-4)
            nn.init.constant_(self.value, value)

    def forward(self):
        return self.value  # [1, ...]


@lowering(PARAM)
def lower(p, inputs, ctx):
    frozen = {"frozen": True} if p.frozen else {}  # model.py as before where not frozen
    value = {"value": p.value} if p.value is not None else {}
    return make(LearnedParam, shape=tuple(p.shape), init=p.init, std=p.std, learned=p.learned, **frozen, **value)


register_facts(PARAM, grid=KEEPS, classifier=None, resample=None)
