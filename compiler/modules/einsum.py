"""einsum (torch): torch.einsum in single letters, three inputs as two pairwise steps."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.einsum import EINSUM, equation_of, pairwise

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .common import make


class Einsum(nn.Module):
    """torch.einsum of the first equation over the first two inputs (or the only one), then of
    each further equation over the result and the next input."""

    def __init__(self, equations):
        super().__init__()
        self.equations = tuple(equations)

    def forward(self, *xs):
        out = torch.einsum(self.equations[0], *one_batch(*xs[:2]))  # [B, ...] the first step's axes
        for equation, x in zip(self.equations[1:], xs[2:]):
            out = torch.einsum(equation, *one_batch(out, x))  # [B, ...] the next step's axes
        return out


def one_batch(*xs):
    """The operands at one batch: one of batch 1 (a param's) expanded to the other's, a view. An
    einsum that broadcast the batch exported to ONNX as a matmul whose reshape ONNX Runtime
    refused (the Perceiver trial's learned queries). A batch known only when run (torch.export's
    symbolic B) is never taken for 1."""
    if len(xs) < 2:
        return xs
    ones = [isinstance(x.shape[0], int) and x.shape[0] == 1 for x in xs]
    if all(ones) or not any(ones):
        return xs
    batch = next(x.shape[0] for x, one in zip(xs, ones) if not one)
    return tuple(x.expand(batch, *x.shape[1:]) if one else x for x, one in zip(xs, ones))  # [1, ...] -> [B, ...]


@lowering(EINSUM)
def lower(p, inputs, ctx):
    return make(Einsum, equations=tuple(step.letters() for step in pairwise(equation_of(p))))


register_facts(EINSUM, grid=KEEPS, classifier=None, resample=None)
