"""A transformer sub-layer as one module: its norms, its body (the attention or MLP of the
subclass), LayerScale, stochastic depth and the residual add, all in `forward`, so that the
module is exactly the sub-layer (hooks, checkpointing and FSDP see the whole of it):

    pre       x + drop_path(ls(body(norm(x))))                 ViT, Swin v1, PVT, CLIP, GPT-2, Llama
    post      norm(x + drop_path(ls(body(x))))                 the 2017 Transformer, BERT
    res_post  x + drop_path(ls(norm(body(x))))                 Swin v2
    sandwich  x + drop_path(ls(post_norm(body(norm(x)))))      CogView, Gemma 2
    none      x + drop_path(ls(body(x)))

ls is LayerScale, a fixed branch_scale, and tanh(residual_gate) (Mllama's gated cross-attention),
each where the node asks for it; with res_scale the shortcut x is scaled too (timm MetaFormer's).

Without the residual (`residual: false`) it returns the branch alone, drop_path(ls(...)): a
parallel block adds the branches and x itself (GPT-J, PaLM).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .common import DropPath, LayerScale
from .norms import norm_module, zero_scale


class Sublayer(nn.Module):
    def __init__(self, width, norm="pre", norm_kind="layer", norm_eps=1e-5, norm_offset=0.0, residual=True,
                 layer_scale=None, drop_path=0.0, norm_bias=True, branch_scale=1.0, norm_affine=True,
                 res_post_init="zeros", residual_gate="none", res_scale=None):
        super().__init__()
        self.place = norm
        self.branch_scale = branch_scale  # a fixed multiplier of the branch (Granite's residual_multiplier)
        self.residual = residual
        norms = (norm_kind, width, norm_eps, norm_offset, norm_bias, norm_affine)
        self.norm = norm_module(*norms) if norm != "none" else None
        if norm == "sandwich":  # Gemma 2's post_attention_layernorm / post_feedforward_layernorm
            self.post_norm = norm_module(*norms)
        if norm == "res_post" and res_post_init == "zeros":  # Swin v2 (timm): each block starts as the identity
            zero_scale(self.norm)
        self.layer_scale = LayerScale(width, layer_scale) if layer_scale is not None else None
        if res_scale is not None:  # the shortcut's own learned scale (timm MetaFormer's res_scale1)
            self.res_scale = LayerScale(width, res_scale)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else None
        if residual_gate == "tanh":  # the branch times tanh(g), g starting at 0 (Mllama's cross_attn_attn_gate)
            self.residual_gate = nn.Parameter(torch.zeros(1))

    def body(self, x, *extra):
        raise NotImplementedError

    def branch(self, h):
        """What the residual adds: the body's output, scaled (LayerScale, branch_scale) and dropped
        (stochastic depth)."""
        if self.layer_scale is not None:
            h = self.layer_scale(h)
        if self.branch_scale != 1.0:
            h = h * self.branch_scale
        if "residual_gate" in self._parameters:
            h = h * self.residual_gate.tanh()  # [B, N, C] * [1]
        return self.drop_path(h) if self.drop_path is not None else h

    def normed_body(self, x, *extra, **options):
        """The body with the norms the place puts around it (all but post's, which follows the add).
        `options`: keywords for the body (generate's `cache`, compiler/generate/cache.py)."""
        if self.place == "pre":
            return self.body(self.norm(x), *extra, **options)
        if self.place == "res_post":
            return self.norm(self.body(x, *extra, **options))
        if self.place == "sandwich":
            return self.post_norm(self.body(self.norm(x), *extra, **options))
        return self.body(x, *extra, **options)

    def scaled_shortcut(self, x):
        """x, or x times the shortcut's learned scale (res_scale)."""
        return self.res_scale(x) if "res_scale" in self._modules else x

    def forward(self, x, *extra, **options):
        if self.place == "post":
            return self.norm(self.scaled_shortcut(x) + self.branch(self.body(x, *extra, **options)))
        h = self.branch(self.normed_body(x, *extra, **options))
        return self.scaled_shortcut(x) + h if self.residual else h


def sublayer_args(p) -> dict:
    """The Sublayer constructor arguments of a node's params."""
    given = {"norm_bias": p.norm_bias, "branch_scale": p.branch_scale, "norm_affine": p.norm_affine,
             "res_post_init": p.res_post_init, "residual_gate": p.residual_gate, "res_scale": p.res_scale}
    given = {k: v for k, v in given.items() if v != DEFAULTS[k]}  # model.py as before where they are the defaults
    return dict(norm=p.norm, norm_kind=p.norm_kind, norm_eps=p.norm_eps, norm_offset=p.norm_offset,
                residual=p.residual, layer_scale=p.layer_scale, drop_path=p.drop_path, **given)


DEFAULTS = {"norm_bias": True, "branch_scale": 1.0, "norm_affine": True, "res_post_init": "zeros",
            "residual_gate": "none", "res_scale": None}  # left out
