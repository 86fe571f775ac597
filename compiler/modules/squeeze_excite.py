"""squeeze_excite (torch): timm's SEModule over an image, or over a token grid read as one (its
parameters and state dict: fc1 and fc2, 1x1 convs)."""

from __future__ import annotations

import torch.nn as nn

from archspec.primitives.grids import as_image
from archspec.primitives.ops.squeeze_excite import SQUEEZE_EXCITE

from ..facts import KEEPS, register_facts
from ..lowering_rules import lowering
from .activations import activation
from .common import grid_as_image, image_as_tokens, make


class SqueezeExcite(nn.Module):
    """`grid` (H, W): the input is tokens [B, H*W, C] on that grid; None: an image [B, C, H, W]."""

    def __init__(self, channels, hidden, act, gate, bias, grid=None):
        super().__init__()
        self.grid = tuple(grid) if grid is not None else None
        self.fc1 = nn.Conv2d(channels, hidden, 1, bias=bias)
        self.act = activation(act)
        self.fc2 = nn.Conv2d(hidden, channels, 1, bias=bias)
        self.gate = activation(gate)

    def forward(self, x):
        image = grid_as_image(x, self.grid) if self.grid is not None else x  # [B, HW, C] -> [B, C, H, W]
        scale = image.mean((2, 3), keepdim=True)  # [B, C, H, W] -> [B, C, 1, 1]
        scale = self.gate(self.fc2(self.act(self.fc1(scale))))  # [B, C, 1, 1] -> [B, hidden, 1, 1] -> [B, C, 1, 1]
        image = image * scale  # [B, C, H, W]
        return image_as_tokens(image) if self.grid is not None else image  # tokens back: [B, HW, C]


@lowering(SQUEEZE_EXCITE)
def lower(p, inputs, ctx):
    (x,) = inputs
    channels = as_image(x, "squeeze_excite")[0]
    return make(SqueezeExcite, channels=channels, hidden=p.hidden, act=p.act, gate=p.gate, bias=p.bias,
                grid=x.grid if x.layout == "tokens" else None)


register_facts(SQUEEZE_EXCITE, grid=KEEPS, classifier=None, resample=None)
