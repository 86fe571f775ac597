"""unfold (torch): F.unfold, an image's sliding blocks as columns."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.unfold import UNFOLD, geometry

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


@lowering(UNFOLD)
def lower(p, inputs, ctx):
    kernel, stride, padding, dilation = geometry(p)
    return make(nn.Unfold, kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)


register_facts(UNFOLD, grid=KEEPS, classifier=None, resample=None)  # its columns are a tensor: no grid
