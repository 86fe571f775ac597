"""softmax (torch): softmax along one axis."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.softmax import SOFTMAX

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


@lowering(SOFTMAX)
def lower(p, inputs, ctx):
    return make(nn.Softmax, dim=p.axis % len(inputs[0].shape))


register_facts(SOFTMAX, grid=KEEPS, classifier=None, resample=None)
