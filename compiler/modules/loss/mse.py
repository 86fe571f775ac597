"""loss kind=mse (torch): F.mse_loss, or its mean over the tokens a mask keeps."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.loss.mse import MSE

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class MseLoss(nn.Module):
    """mean((p - t)^2); with a mask [B, L], over the values of the tokens it marks 1."""

    def forward(self, prediction, target, *mask):
        if not mask:
            return F.mse_loss(prediction, target)
        kept = mask[0].unsqueeze(-1).type_as(prediction)  # [B, L] -> [B, L, 1]
        squared = (prediction - target).square() * kept  # [B, L, C]
        return squared.sum() / (kept.sum() * prediction.shape[-1])


@lowering(MSE)
def lower(p, inputs, ctx):
    return make(MseLoss)


register_facts(MSE, grid=KEEPS, classifier=None, resample=None)
