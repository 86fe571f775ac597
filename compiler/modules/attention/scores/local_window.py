"""score part local_window (torch): hides the keys more than window // 2 places from the query,
either side (Hugging Face's ModernBertAttention local mask); AttentionKernel.hides (kernel.py) joins it to
the kind's mask, for SDPA's additive mask, the written-out attention and flex_attention alike."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.ops.attention.scores.local_window import LOCAL_WINDOW

from ...common import make
from .base import score_module


class LocalWindow(nn.Module):
    def __init__(self, window):
        super().__init__()
        self.half = window // 2

    def extra_repr(self) -> str:
        return f"|i - j| <= {self.half}"

    def hides(self, query, key):
        """True where the key is more than window // 2 from the query (broadcastable indices)."""
        return (query - key).abs() > self.half


@score_module(LOCAL_WINDOW)
def make_local_window(p, site):
    return make(LocalWindow, window=p.window)
