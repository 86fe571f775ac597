"""loss kind=cross_entropy (torch)."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.loss.cross_entropy import CROSS_ENTROPY

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class CrossEntropyLoss(nn.Module):
    def __init__(self, ignore_index=-100, shift=False, label_smoothing=0.0):
        super().__init__()
        self.ignore_index, self.shift, self.label_smoothing = ignore_index, shift, label_smoothing

    def forward(self, logits, target):
        if self.shift:  # position t predicts token t + 1
            logits, target = logits[:, :-1], target[:, 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                               ignore_index=self.ignore_index, label_smoothing=self.label_smoothing)


@lowering(CROSS_ENTROPY)
def lower(p, inputs, ctx):
    return make(CrossEntropyLoss, ignore_index=p.ignore_index, shift=p.shift, label_smoothing=p.label_smoothing)


register_facts(CROSS_ENTROPY, grid=KEEPS, classifier=None, resample=None)
