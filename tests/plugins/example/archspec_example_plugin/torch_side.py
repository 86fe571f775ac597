"""The plugin's torch side: a module and a lowering rule per op."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.compiler.facts import KEEPS, register_facts
from archspec.compiler.lowering_rules import lowering
from archspec.compiler.modules.common import make

from .rules import MEAN_MAX, SCALE


class Scale(nn.Module):
    def __init__(self, init=1.0):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(init)))

    def forward(self, x):
        return x * self.alpha


class MeanMaxHead(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.fc = nn.Linear(2 * dim, classes)

    def forward(self, x):
        return self.fc(torch.cat([x.mean(1), x.amax(1)], dim=-1))  # [B, N, C] -> [B, 2C] -> [B, classes]


@lowering(SCALE)
def lower_scale(p, inputs, ctx):
    return make(Scale, init=p.init)


@lowering(MEAN_MAX)
def lower_mean_max(p, inputs, ctx):
    return make(MeanMaxHead, dim=inputs[0].channels, classes=p.classes)


register_facts(SCALE, grid=KEEPS, fusion=None, classifier=None, resample=None)
register_facts(MEAN_MAX, grid=KEEPS, fusion=None, classifier=None, resample=None)
