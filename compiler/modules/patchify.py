"""patchify (torch): convolution to patches, optional norm, class token, positions.
Also the module of merge kind=conv (PVT v2's OverlapPatchEmbed): a conv and a norm."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.grids import as_image, conv_grid
from archspec.primitives.ops.patchify import PATCHIFY, geometry

from ..facts import register_facts
from ..lowering_rules import lowering
from ..weights.resample import positions_of
from .common import Conv2d, eager_inference, grid_as_image, image_as_tokens, make
from .norms import norm_module


def sincos_2d(grid, dim: int, temperature: float = 10000.0):
    """Fixed 2-D sin-cos positions (MAE, timm build_sincos2d_pos_embed): [H*W, dim]."""
    h, w = grid
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                            indexing="ij")
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float32) / quarter)
    out_y = ys.flatten()[:, None] * omega[None, :]  # [H*W, dim/4]
    out_x = xs.flatten()[:, None] * omega[None, :]
    return torch.cat([out_x.sin(), out_x.cos(), out_y.sin(), out_y.cos()], dim=1)  # [H*W, dim]


class PatchEmbed(nn.Module):
    def __init__(self, in_channels, dim, kernel, stride, padding, bias, grid, norm_eps=None, cls_token=False,
                 pos="none", tokens_in=False, in_grid=None, dropout=0.0, pos_frozen=False, norm_kind="layer"):
        super().__init__()
        self.grid, self.in_grid, self.tokens_in = tuple(grid), tuple(in_grid or ()), tokens_in
        self.proj = Conv2d(in_channels, dim, kernel, stride, padding, bias=bias)
        self.norm = norm_module(norm_kind, dim, norm_eps) if norm_eps is not None else None
        prefix = int(cls_token)  # true: one class token; a count: that many (DeiT: class and distillation)
        self.cls_token = nn.Parameter(torch.zeros(1, prefix, dim)) if prefix else None
        positions = prefix + self.grid[0] * self.grid[1]
        self.pos_embed = nn.Parameter(torch.zeros(1, positions, dim)) if pos == "learned" else None
        if pos == "sincos":
            table = sincos_2d(self.grid, dim)
            if prefix:  # the prefix tokens' rows are zeros (MAE's add_cls_token)
                table = torch.cat([torch.zeros(prefix, dim), table])
            if pos_frozen:  # MAE: a parameter that never trains, in the state dict
                self.pos_embed = nn.Parameter(table[None], requires_grad=False)  # [1, positions, dim]
        if pos == "sincos" and not pos_frozen:
            self.register_buffer("pos_table", table[None], persistent=False)  # [1, positions, dim]
        else:
            self.pos_table = None
        self.drop = nn.Dropout(dropout) if dropout > 0 else None
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        if self.pos_embed is not None and pos == "learned":
            nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def forward(self, x):
        if self.tokens_in:  # a token grid read as an image: [B, N, C] -> [B, C, H, W], channels-last (a view)
            x = grid_as_image(x, self.in_grid)
        elif eager_inference(self, x) and x.dim() == 4:  # a channels-last output is the tokens (no copy)
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.proj(x)  # [B, C, H, W] -> [B, dim, H', W']
        x = image_as_tokens(x)  # -> [B, H'W', dim]
        if self.norm is not None:
            x = self.norm(x)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # -> [B, prefix + H'W', dim]
        if self.pos_embed is not None:
            x = x + self.pos_embed
        if self.pos_table is not None:
            x = x + self.pos_table
        if self.drop is not None:
            x = self.drop(x)
        return x


def patch_embed_args(x, kernel, stride, padding, dim, grid):
    channels, in_grid, _ = as_image(x, "patchify")
    return dict(in_channels=channels, dim=dim, kernel=kernel, stride=stride, padding=padding, grid=grid,
                tokens_in=x.layout == "tokens", in_grid=in_grid)


@lowering(PATCHIFY)
def lower(p, inputs, ctx):
    kernel, stride, padding = geometry(p)
    return make(PatchEmbed, **patch_embed_args(inputs[0], kernel, stride, padding, p.dim, ctx.node.type.grid),
                bias=p.bias, norm_eps=p.norm_eps if p.norm else None, cls_token=p.cls_token, pos=p.pos,
                dropout=p.dropout, **({"pos_frozen": True} if p.pos_frozen else {}),
                **({"norm_kind": p.norm_kind} if p.norm_kind != "layer" else {}))  # model.py as before without it


def patch_grid(p, grid):
    """The token grid of the patches of an image or grid `grid` (H, W)."""
    return conv_grid(grid, *geometry(p))  # (H, W) -> (H', W')


def patch_positions(module) -> dict:
    """RESAMPLE: a position table (learned, or MAE's frozen one) made for another grid is
    resampled to this one's, the prefix tokens' rows kept."""
    if not isinstance(module.pos_embed, nn.Parameter):
        return {}
    prefix = module.cls_token.shape[1] if module.cls_token is not None else 0
    return {"pos_embed": positions_of(module.grid, prefix)}


register_facts(PATCHIFY, grid=patch_grid, classifier=None, resample=patch_positions)
