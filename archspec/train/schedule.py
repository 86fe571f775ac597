"""The learning rate at each step: linear warm-up, then cosine decay or constant (torch-free).

The factor of --lr at step k (0-based) of a run of `total` steps with `warmup` warm-up steps:

    k < warmup:   (k + 1) / warmup                      as torch's LinearLR(1/warmup, 1, warmup - 1)
    cosine:       (1 + cos(pi * (k - warmup) / (total - warmup))) / 2
                                                        as torch's CosineAnnealingLR(total - warmup)
    constant:     1

It is a closed form of the step, so a resumed run takes the rate the straight run would have
taken (the loop sets each group's lr before each step; nothing of it is saved).
"""

from __future__ import annotations

import math


def lr_factor(step: int, total: int, warmup: int = 0, schedule: str = "cosine") -> float:
    """The factor of the base learning rate at `step` (see the module's docstring)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    return (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) / 2
