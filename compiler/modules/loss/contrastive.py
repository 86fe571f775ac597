"""loss kind=contrastive (torch): CLIP's symmetric cross-entropy over image-text logits."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.loss.contrastive import CONTRASTIVE_LOSS

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class ContrastiveLoss(nn.Module):
    def forward(self, logits):
        labels = torch.arange(logits.shape[0], device=logits.device)  # the diagonal pairs match
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


@lowering(CONTRASTIVE_LOSS)
def lower(p, inputs, ctx):
    return make(ContrastiveLoss)


register_facts(CONTRASTIVE_LOSS, grid=KEEPS, classifier=None, resample=None)
