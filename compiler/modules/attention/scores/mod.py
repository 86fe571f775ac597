"""score part mod (torch): the spec's steps over the score, its indices and named tensors, each op
one torch function from the table below (never eval), run as the part's `before_softmax` and,
under torch.compile, as flex_attention's score_mod (kernel.py)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.scores.mod import INDICES, MOD, SCORE, parse_steps
from ...common import make
from .base import score_module

FUNCTIONS = {  # each op of the rule's table (archspec/primitives/ops/attention/scores/mod.py: OPS)
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.div,
    "floor_divide": torch.floor_divide, "remainder": torch.remainder, "tanh": torch.tanh,
    "exp": torch.exp, "log": torch.log, "abs": torch.abs, "clamp": torch.clamp, "less": torch.lt,
    "less_equal": torch.le, "greater": torch.gt, "greater_equal": torch.ge, "equal": torch.eq, "not_equal": torch.ne,
    "and": torch.logical_and, "or": torch.logical_or, "not": torch.logical_not, "where": torch.where,
    "maximum": torch.maximum, "minimum": torch.minimum,
}
TENSORS_ONLY = ("maximum", "minimum")  # torch's take no number: one becomes a tensor of the scores' type
SCORE_NAME = "score"  # the names a step reads besides the tensors and earlier steps (the rule's SCORE, INDICES)
INDEX_NAMES = "b h q k"
assert (SCORE_NAME, tuple(INDEX_NAMES.split())) == (SCORE, INDICES)


class ScoreMod(nn.Module):
    """The steps (name, op, arguments), evaluated over the scores [B, h, N, M]; `tensors`: the
    names of the inputs they read (ScoreIndex.tensors while the attention runs)."""

    reads_index = True

    def __init__(self, steps, tensors=()):
        super().__init__()
        self.steps = [tuple(step) for step in steps]  # [(name, op, (arguments...)), ...]
        self.tensors = tuple(tensors)

    def extra_repr(self) -> str:
        return "; ".join(f"{name} = {op}({', '.join(map(str, args))})" for name, op, args in self.steps)

    def before_softmax(self, scores, index):
        found = dict(zip(self.tensors, index.tensors))
        return self.modify(scores, index.batch, index.head, index.query, index.key, found)

    def modify(self, score, b, h, q, k, tensors):
        """The new score from the score and its indices (tensors or, in flex_attention's
        score_mod, scalars of a score), each step one op."""
        values = {SCORE_NAME: score, **dict(zip(INDEX_NAMES.split(), (b, h, q, k))), **tensors}
        for name, op, args in self.steps:
            given = [values[a] if isinstance(a, str) else a for a in args]
            if op == "at":  # the tensor's last dims, one index each (those before them are 1)
                table = given[0]
                values[name] = table.reshape(table.shape[table.dim() - len(given) + 1:])[tuple(given[1:])]
                continue
            numbers = range(len(given)) if op in TENSORS_ONLY else (0,)  # a number first: a tensor of the scores' type
            for i in numbers:
                if not isinstance(given[i], torch.Tensor):
                    given[i] = torch.as_tensor(given[i], dtype=score.dtype, device=score.device)
            values[name] = FUNCTIONS[op](*given)
        out = values[self.steps[-1][0]]
        return out.to(score.dtype) if out.dtype != score.dtype else out


@score_module(MOD)
def make_mod(p, site):
    steps = [(s.name, s.op, s.args) for s in parse_steps(p)]
    return make(ScoreMod, steps=steps, tensors=tuple(p.tensors))
