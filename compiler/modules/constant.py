"""constant (torch): a fixed tensor with a leading dimension of 1, kept as a buffer."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.constant import CONSTANT, index_axis

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


def filled(shape, fill=None, value=None, axis=None):
    """A tensor of `shape`: every value `value`, or zeros, ones, an identity on the last two axes,
    or each value its index along `axis`."""
    if value is not None:
        return torch.full(shape, float(value))
    if fill == "ones":
        return torch.ones(shape)
    if fill == "eye":
        return torch.eye(shape[-2], shape[-1]).expand(shape).clone()  # the identity on every leading index
    if fill == "index":
        line = [1] * len(shape)
        line[axis] = shape[axis]
        return torch.arange(shape[axis], dtype=torch.float32).view(line).expand(shape).clone()  # [1, ...]
    return torch.zeros(shape)


class Constant(nn.Module):
    def __init__(self, shape, fill=None, value=None, axis=None):
        super().__init__()
        self.register_buffer("value", filled((1, *shape), fill, value, axis), persistent=False)  # [1, ...]

    def forward(self):
        return self.value  # [1, ...]


@lowering(CONSTANT)
def lower(p, inputs, ctx):
    axis = index_axis(p) if p.fill == "index" else None
    return make(Constant, shape=tuple(p.shape), fill=p.fill, value=p.value, axis=axis)


register_facts(CONSTANT, grid=KEEPS, classifier=None, resample=None)
