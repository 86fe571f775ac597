"""score part sinks (torch): a learned logit per head, `sinks` [heads] (Hugging Face's
GptOssAttention name), that AttentionKernel.scored (kernel.py) joins to each query's softmax as one more
column and drops after it."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.sinks import SINKS

from ...common import make
from .base import score_module


class Sinks(nn.Module):
    """`sinks` [heads], zeros at first (a sink worth one key of score 0)."""

    def __init__(self, heads):
        super().__init__()
        self.sinks = nn.Parameter(torch.zeros(heads))

    def sink_logit(self):
        return self.sinks  # [h]


@score_module(SINKS)
def make_sinks(p, site):
    return make(Sinks, heads=site.heads)
