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
        out = torch.einsum(self.equations[0], *xs[:2])  # [B, ...] the first step's axes
        for equation, x in zip(self.equations[1:], xs[2:]):
            out = torch.einsum(equation, out, x)  # [B, ...] the next step's axes
        return out


@lowering(EINSUM)
def lower(p, inputs, ctx):
    return make(Einsum, equations=tuple(step.letters() for step in pairwise(equation_of(p))))


register_facts(EINSUM, grid=KEEPS, classifier=None, resample=None)
