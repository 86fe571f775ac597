"""head kind=lm (torch): logits over the vocabulary for every token; the weight may be an
embed node's table."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.head.lm import LM, lm_vocab

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make, trunc_normal_linears


class LanguageModelHead(nn.Module):
    """Logits over the vocabulary for every token; the weight may be an embed table."""

    def __init__(self, dim, vocab, tied=False, bias=False, divisor=1.0, softcap=None):
        super().__init__()
        self.divisor = divisor  # the logits divided by it (Granite's logits_scaling)
        self.softcap = softcap  # None, or the logits capped to (-cap, cap) by cap * tanh(x / cap) (Gemma 2)
        self.fc = None if tied else nn.Linear(dim, vocab, bias=False)
        self.table = None  # a tied nn.Embedding, set by the lowering
        self.bias = nn.Parameter(torch.zeros(vocab)) if bias else None
        if self.fc is not None:
            trunc_normal_linears(self)

    def forward(self, x):
        weight = self.fc.weight if self.fc is not None else self.table.weight
        logits = F.linear(x, weight, self.bias)  # [B, L, C] -> [B, L, vocab]
        logits = logits / self.divisor if self.divisor != 1.0 else logits
        return self.softcap * torch.tanh(logits / self.softcap) if self.softcap is not None else logits


@lowering(LM)
def lower(p, inputs, ctx):
    width = inputs[0].channels
    if p.tie is not None:
        ctx.tie("table", p.tie + ".tokens")
    divisor = {"divisor": p.logits_divisor} if p.logits_divisor != 1.0 else {}  # model.py as before without it
    softcap = {"softcap": p.logits_softcap} if p.logits_softcap is not None else {}
    return make(LanguageModelHead, dim=width, vocab=lm_vocab(p, width, ctx), tied=p.tie is not None, bias=p.bias,
                **divisor, **softcap)


register_facts(LM, grid=KEEPS, classifier=None, resample=None)
