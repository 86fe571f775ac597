"""norm kind=layer (torch): a LayerNorm over the channels: nn.LayerNorm on tokens or a vector,
LayerNorm2d on an image (timm's: channels moved last, normalised, moved back), each with or
without a bias (torch's LayerNorm(bias=False)); with an offset, norms.OffsetLayerNorm. The state
dict holds torch's names (weight, bias)."""

from __future__ import annotations

from archspec.primitives.ops.norm.layer import LAYER

import torch.nn as nn
import torch.nn.functional as F

from ...facts import FEATURE_NORM, KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import make
from ..norms import OffsetLayerNorm


class LayerNorm2d(nn.LayerNorm):
    """A LayerNorm over the channels of an image [B, C, H, W] at every pixel (timm's LayerNorm2d)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)  # [B, C, H, W] -> [B, H, W, C]
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)  # [B, H, W, C] -> [B, C, H, W]


@lowering(LAYER)
def lower(p, inputs, ctx):
    if p.offset:
        return make(OffsetLayerNorm, normalized_shape=inputs[0].channels, eps=p.eps, offset=p.offset, bias=p.bias)
    kind = LayerNorm2d if inputs[0].layout == "image" else nn.LayerNorm
    if not p.affine:  # OLMo's: no weight, no bias
        return make(kind, normalized_shape=inputs[0].channels, eps=p.eps, elementwise_affine=False)
    if p.bias:
        return make(kind, normalized_shape=inputs[0].channels, eps=p.eps)
    return make(kind, normalized_shape=inputs[0].channels, eps=p.eps, bias=False)


register_facts(LAYER, grid=KEEPS, classifier=None, resample=None)
FEATURE_NORM.register(LAYER, True)
