"""loss kind=masked_l1 (torch): SimMIM's loss."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.loss.masked_l1 import MASKED_L1

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class MaskedL1Loss(nn.Module):
    """sum(|p - t| * m) / (sum(m) + 1e-5) / channels, m the grid mask repeated to pixels."""

    def __init__(self, cell):
        super().__init__()
        self.cell = tuple(cell)  # pixels per mask cell (rows, columns)

    def forward(self, prediction, target, mask):
        m = mask.repeat_interleave(self.cell[0], 1).repeat_interleave(self.cell[1], 2)  # [B, h, w] -> [B, H, W]
        m = m.unsqueeze(1).type_as(prediction)  # -> [B, 1, H, W]
        distance = F.l1_loss(target, prediction, reduction="none")  # [B, C, H, W]
        return (distance * m).sum() / (m.sum() + 1e-5) / prediction.shape[1]


@lowering(MASKED_L1)
def lower(p, inputs, ctx):
    prediction, _, mask = inputs
    cell = (prediction.shape[2] // mask.grid[0], prediction.shape[3] // mask.grid[1])
    return make(MaskedL1Loss, cell=cell)


register_facts(MASKED_L1, grid=KEEPS, classifier=None, resample=None)
