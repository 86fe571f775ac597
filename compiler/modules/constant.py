"""constant (torch): a fixed tensor with a leading dimension of 1, kept as a buffer."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.constant import CONSTANT

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


def filled(shape, fill=None, value=None):
    """A tensor of `shape`: every value `value`, or zeros, ones, or an identity on the last two axes."""
    if value is not None:
        return torch.full(shape, float(value))
    if fill == "ones":
        return torch.ones(shape)
    if fill == "eye":
        return torch.eye(shape[-2], shape[-1]).expand(shape).clone()  # the identity on every leading index
    return torch.zeros(shape)


class Constant(nn.Module):
    def __init__(self, shape, fill=None, value=None):
        super().__init__()
        self.register_buffer("value", filled((1, *shape), fill, value), persistent=False)  # [1, ...]

    def forward(self):
        return self.value  # [1, ...]


@lowering(CONSTANT)
def lower(p, inputs, ctx):
    return make(Constant, shape=tuple(p.shape), fill=p.fill, value=p.value)


register_facts(CONSTANT, grid=KEEPS, fusion=None, head=None)
