"""How a score part's module is made and placed.

Each part file registers a maker against the rule-side part object (its SCORE_MODULE fact):

    @score_module(TALKING_HEADS)
    def make_talking_heads(p, site):
        return make(TalkingHeads, heads=site.heads)

Lowering a sequence attention node builds the attention module with `score_parts` (the parts'
names, in order) and installs each part's module as a child of that name: the attention calls
them in order, and model.py constructs them the same way. A part module has either
`bias(q, k)` -> an additive bias [B, h, N, M] (fused attention stays possible) or
`before_softmax(scores)` / `after_softmax(weights)` (the attention is written out), or
`rotate(q, k)` -> (q, k): queries and keys turned after the q/k norms and before the scores
(2-D rotary positions; the sequence kinds call it, and fused attention stays possible).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from archspec.core.discovery import import_modules
from archspec.primitives.facts import Fact
from archspec.primitives.ops.attention.scores.base import ScorePart, ScoreSite, parse_scores


class ScoreIndex:
    """The indices of the scores [B, h, N, M] a part with `reads_index = True` is given with them
    (FlexAttention's b, h, q_idx, kv_idx), each broadcastable to the scores: batch [B, 1, 1, 1],
    head [1, h, 1, 1], query [1 or B, 1, N, 1], key [1 or B, 1, 1, M]; and `tensors`, the inputs the
    parts read by name (`mod`'s), in order. In the forward the query and key indices are the slots
    0..N-1 and 0..M-1; while generate() decodes they are the tokens' positions (0 on the left
    padding, which the mask hides), so a cached row sees what it would see alone."""

    def __init__(self, batch, head, query, key, tensors=()):
        self.batch, self.head, self.query, self.key, self.tensors = batch, head, query, key, tuple(tensors)

    @staticmethod
    def of_slots(q, k, tensors=()) -> "ScoreIndex":
        """The indices of the scores of q [B, h, N, d] over k [B, h, M, d]: the slots."""
        return ScoreIndex(*batch_and_head(q), torch.arange(q.shape[-2], device=q.device).view(1, 1, -1, 1),
                          torch.arange(k.shape[-2], device=q.device).view(1, 1, 1, -1), tuple(tensors))

    @staticmethod
    def of_positions(q, query_positions, key_positions, tensors=()) -> "ScoreIndex":
        """The indices while generate() decodes: the queries' positions [B, N] and the cached keys'
        [B, M] (cache.py's state)."""
        return ScoreIndex(*batch_and_head(q), query_positions[:, None, :, None], key_positions[:, None, None, :],
                          tuple(tensors))


def batch_and_head(q) -> tuple:
    """[B, 1, 1, 1] and [1, h, 1, 1] indices of q [B, h, N, d]."""
    return (torch.arange(q.shape[0], device=q.device).view(-1, 1, 1, 1),
            torch.arange(q.shape[1], device=q.device).view(1, -1, 1, 1))


_FOUND = False  # the part files of this folder imported


def _load_makers(part=None) -> None:
    """Import the part files of this folder (each registers its maker here), not the whole
    lowering discovery: this module is one that discovery imports."""
    global _FOUND
    if not _FOUND:
        _FOUND = True
        import_modules(__package__)


SCORE_MODULE = Fact("SCORE_MODULE", "the score part's torch module: a function (params, ScoreSite) -> nn.Module",
                    "the part's torch file (compiler/modules/attention/scores/<part>.py), with @score_module(PART)",
                    load=_load_makers)


def score_module(part: ScorePart):
    """Register the decorated function as `part`'s SCORE_MODULE (its maker)."""
    def register(maker: Callable) -> Callable:
        SCORE_MODULE.register(part, maker)
        return maker
    return register


def score_part_names(p) -> tuple[str, ...]:
    """The child names the parts get: the part's name, numbered when a part repeats."""
    names: list[str] = []
    for use in parse_scores(p.scores):
        name, n = use.part.name, 1
        while name in names:
            n += 1
            name = f"{use.part.name}_{n}"
        names.append(name)
    return tuple(names)


def install_score_parts(module: nn.Module, p, site: ScoreSite) -> nn.Module:
    """Make each part's module and place it in `module` under its name."""
    for name, use in zip(score_part_names(p), parse_scores(p.scores)):
        module.add_module(name, SCORE_MODULE.of(use.part)(use.params, site))
    return module
