"""head kind=contrastive (torch): CLIP's image-text logits."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.head.contrastive import CONTRASTIVE

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make


class ContrastiveLogits(nn.Module):
    """CLIP: cosine similarity of image and text features times a learned scale -> [B, B]."""

    def __init__(self, logit_scale):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(float(logit_scale)))

    def forward(self, image, text):
        image = image / image.norm(p=2, dim=-1, keepdim=True)
        text = text / text.norm(p=2, dim=-1, keepdim=True)
        logits_per_text = torch.matmul(text, image.t()) * self.logit_scale.exp()  # [B_text, B_image]
        return logits_per_text.t()  # logits per image: [B_image, B_text]


@lowering(CONTRASTIVE)
def lower(p, inputs, ctx):
    return make(ContrastiveLogits, logit_scale=p.logit_scale)


register_facts(CONTRASTIVE, grid=KEEPS, classifier=None, resample=None)
