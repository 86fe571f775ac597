"""linear (torch): nn.Linear over the channels."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.linear import LINEAR

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make, trunc_normal_linears


@lowering(LINEAR)
def lower(p, inputs, ctx):
    module = make(nn.Linear, in_features=inputs[0].channels, out_features=p.dim, bias=p.bias)
    trunc_normal_linears(module)
    return module


register_facts(LINEAR, grid=KEEPS, classifier=None, resample=None)
