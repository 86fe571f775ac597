"""norm kind=affine (torch): x * weight + bias per channel, nothing normalised (MobileBERT's
NoNorm: its state dict's weight and bias)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.norm.affine import AFFINE

from ...facts import FEATURE_NORM, KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class ChannelAffine(nn.Module):
    """x * weight + bias over the channels: the last axis, or an image's axis 1 (`image`)."""

    def __init__(self, channels: int, bias: bool = True, image: bool = False):
        super().__init__()
        self.image = image
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None

    def forward(self, x):
        shape = (-1, 1, 1) if self.image else (-1,)  # [C] -> [C, 1, 1] against an image's [B, C, H, W]
        x = x * self.weight.view(shape)
        return x + self.bias.view(shape) if self.bias is not None else x


@lowering(AFFINE)
def lower(p, inputs, ctx):
    return make(ChannelAffine, channels=inputs[0].channels, bias=p.bias, image=inputs[0].layout == "image")


register_facts(AFFINE, grid=KEEPS, classifier=None, resample=None)
FEATURE_NORM.register(AFFINE, True)  # ResMLP's final norm is an Affine
