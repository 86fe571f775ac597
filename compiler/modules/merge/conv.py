"""merge kind=conv (torch): a strided, overlapping conv and a LayerNorm (PVT v2's
OverlapPatchEmbed), which is patchify's module."""

from __future__ import annotations

from archspec.primitives.grids import conv_grid
from archspec.primitives.ops.merge.conv import CONV

from ...facts import register_facts
from ...lowering_rules import lowering
from ..common import make
from ..patchify import PatchEmbed, patch_embed_args


@lowering(CONV)
def lower(p, inputs, ctx):
    return make(PatchEmbed, **patch_embed_args(inputs[0], p.kernel, p.stride, p.padding, p.dim, ctx.node.type.grid),
                bias=True, norm_eps=p.norm_eps)


def merged_grid(p, grid):
    """The grid after the strided conv."""
    return conv_grid(grid, p.kernel, p.stride, p.padding)  # (H, W) -> (H', W')


register_facts(CONV, grid=merged_grid, classifier=None, resample=None)
