"""head (torch): classification, language-model logits, pooled features, CLIP logits."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..primitives.head import lm_vocab
from .common import Emitter, make, register_lowering, trunc_normal_linears


def pool_tokens(x, pool: str, prefix: int):
    if pool == "cls":
        return x[:, 0]  # [B, N, C] -> [B, C]
    return x[:, prefix:].mean(dim=1)  # mean of the grid tokens -> [B, C]


class ClassifierHead(nn.Module):
    def __init__(self, dim, classes, pool="mean", prefix=0, norm_eps=None, bias=True):
        super().__init__()
        self.pool, self.prefix = pool, prefix
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm_eps is not None else None
        self.fc = nn.Linear(dim, classes, bias=bias)
        trunc_normal_linears(self)

    def forward(self, x):
        x = pool_tokens(x, self.pool, self.prefix)  # [B, N, C] -> [B, C]
        if self.norm is not None:
            x = self.norm(x)
        return self.fc(x)  # -> [B, classes]


class LanguageModelHead(nn.Module):
    """Logits over the vocabulary for every token; the weight may be an embed table."""

    def __init__(self, dim, vocab, tied=False, bias=False):
        super().__init__()
        self.fc = None if tied else nn.Linear(dim, vocab, bias=False)
        self.table = None  # a tied nn.Embedding, set by the lowering
        self.bias = nn.Parameter(torch.zeros(vocab)) if bias else None
        if self.fc is not None:
            trunc_normal_linears(self)

    def forward(self, x):
        weight = self.fc.weight if self.fc is not None else self.table.weight
        return F.linear(x, weight, self.bias)  # [B, L, C] -> [B, L, vocab]


class FeaturesHead(nn.Module):
    """Pool (cls / mean / eos / none), optional LayerNorm, optional projection (CLIP towers)."""

    def __init__(self, dim, pool="cls", prefix=0, eos_id=None, norm_eps=None, project=None):
        super().__init__()
        self.pool, self.prefix, self.eos_id = pool, prefix, eos_id
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if norm_eps is not None else None
        self.proj = nn.Linear(dim, project, bias=False) if project else None
        trunc_normal_linears(self)

    def forward(self, x, ids=None):
        if self.pool == "eos":
            if self.eos_id is None:  # CLIP: the end-of-text token has the largest id
                position = ids.argmax(dim=-1)
            else:
                position = (ids == self.eos_id).int().argmax(dim=-1)
            x = x[torch.arange(x.shape[0], device=x.device), position]  # [B, L, C] -> [B, C]
        elif self.pool != "none":
            x = pool_tokens(x, self.pool, self.prefix)
        if self.norm is not None:
            x = self.norm(x)
        if self.proj is not None:
            x = self.proj(x)
        return x


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


@register_lowering("head")
def lower(node, inputs, emit: Emitter, args):
    p, x = node.params, inputs[0]
    eps = p.norm_eps if getattr(p, "norm", False) else None
    if p.kind == "classify":
        module = make(ClassifierHead, dim=x.channels, classes=p.classes, pool=p.pool, prefix=x.prefix,
                      norm_eps=eps, bias=p.bias)
    elif p.kind == "lm":
        module = make(LanguageModelHead, dim=x.channels, vocab=lm_vocab(p, x.channels, emit), tied=p.tie is not None,
                      bias=p.bias)
        if p.tie is not None:
            emit.tie("", "table", p.tie + ".tokens")
    elif p.kind == "features":
        module = make(FeaturesHead, dim=x.channels, pool=p.pool, prefix=x.prefix, eos_id=p.eos_id, norm_eps=eps,
                      project=p.project)
    else:
        module = make(ContrastiveLogits, logit_scale=p.logit_scale)
    emit.install(module)
    return emit.call("", *args)
