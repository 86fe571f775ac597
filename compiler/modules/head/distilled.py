"""head kind=distilled (torch): DeiT's class and distillation heads."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.head.distilled import DISTILLED

from ...facts import KEEPS, Classifier, register_facts
from ...lowering_rules import lowering
from ..common import make, trunc_normal_linears


class DistilledHead(nn.Module):
    """Average of the two heads in eval; both, as a tuple (class, distillation), in training."""

    def __init__(self, dim, classes):
        super().__init__()
        self.fc = nn.Linear(dim, classes)
        self.fc_dist = nn.Linear(dim, classes)
        trunc_normal_linears(self)

    def forward(self, x):
        logits, distilled = self.fc(x[:, 0]), self.fc_dist(x[:, 1])  # [B, N, C] -> 2 x [B, classes]
        if self.training:
            return logits, distilled
        return (logits + distilled) / 2


@lowering(DISTILLED)
def lower(p, inputs, ctx):
    return make(DistilledHead, dim=inputs[0].channels, classes=p.classes)


def average_of_the_two_tokens(head: DistilledHead, x):
    """What forward_head(pre_logits=True) gives, as timm's DeiT: the class and distillation
    tokens averaged."""
    return (x[:, 0] + x[:, 1]) / 2  # [B, N, C] -> [B, C]


register_facts(DISTILLED, grid=KEEPS, classifier=Classifier(layers=("fc", "fc_dist"),
                                                                    pre_logits=average_of_the_two_tokens), resample=None)
