"""score part softcap (torch): scores -> cap · tanh(scores / cap) before the softmax (Gemma 2)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.softcap import SOFTCAP

from ...common import make
from .base import score_module


class Softcap(nn.Module):
    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def before_softmax(self, scores):
        return torch.tanh(scores / self.cap) * self.cap

    def modify(self, score, b, h, q, k, tensors):
        """The same, as flex_attention's score_mod sees it (kernel.py: flexed)."""
        return self.before_softmax(score)


@score_module(SOFTCAP)
def make_softcap(p, site):
    return make(Softcap, cap=p.cap)
