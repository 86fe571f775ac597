"""attention kind=differential (torch): causal attention whose output heads are differences of
pairs of softmax maps, as Hugging Face's DiffLlamaAttention (archspec/primitives/ops/attention/
differential.py has the formula). Two SDPA calls, as Hugging Face's: the same queries and keys
over each half of the key/value heads' values, their outputs combined after them; generate's
cache holds the keys and values as causal attention's and makes the same two calls (cache.py's
KVCache.attend calls `value_calls` and `combine_heads`). Two calls over head_dim-wide values,
not one over 2 x head_dim: TensorRT converts SDPA only with values as wide as the keys."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.differential import DIFFERENTIAL

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .causal import CausalMask
from .sequence import SelfAttention, make_sequence_attention


class DifferentialAttention(SelfAttention):
    """SelfAttention with DiffLlama's values, lambda and per-head RMSNorm (see the module docstring)."""

    def __init__(self, dim, heads, lambda_init, lambda_std=0.1, head_norm_eps=1e-5, **attention):
        super().__init__(dim, heads, **attention)
        self.lambda_init, self.head_norm_eps = lambda_init, head_norm_eps
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, nn.Parameter(torch.randn(self.head_dim) * lambda_std))  # [head_dim]

    def value_calls(self, v) -> tuple:
        """Two kernel calls, over the first and the second half of the key/value heads, each half
        tiled over both halves (Hugging Face's chunk and repeat): the same weights in both, so
        the pair of outputs is the weights times [v1 | v2]."""
        first, second = v.chunk(2, dim=1)  # [B, h_kv, M, d] -> 2 x [B, h_kv/2, M, d]
        return first.repeat(1, 2, 1, 1), second.repeat(1, 2, 1, 1)  # 2 x [B, h_kv, M, d]

    def combine_heads(self, outs: tuple):
        """The first half of the heads' outputs minus lambda times the second half, each head
        normalised (RMS, no weight) and scaled by 1 - lambda_init."""
        x = torch.cat(outs, dim=-1)  # 2 x [B, h, N, d] -> [B, h, N, 2d]
        first, second = x.chunk(2, dim=1)  # -> 2 x [B, h/2, N, 2d]
        lam = torch.exp((self.lambda_q1 * self.lambda_k1).sum(dtype=torch.float32)) - torch.exp(
            (self.lambda_q2 * self.lambda_k2).sum(dtype=torch.float32))
        lam = (lam + self.lambda_init).to(x.dtype)  # a 0-d tensor
        out = F.rms_norm(first - lam * second, (x.shape[-1],), eps=self.head_norm_eps)  # [B, h/2, N, 2d]
        return out * (1 - self.lambda_init)

    def extra_repr(self) -> str:
        return f"lambda_init={self.lambda_init:g}, head_norm_eps={self.head_norm_eps:g}"


@lowering(DIFFERENTIAL)
def lower(p, inputs, ctx):
    return make_sequence_attention(DifferentialAttention, DIFFERENTIAL, p, inputs, keys=CausalMask(),
                                   lambda_init=p.lambda_init, lambda_std=p.lambda_std,
                                   head_norm_eps=p.head_norm_eps)


register_facts(DIFFERENTIAL, grid=KEEPS, classifier=None, resample=None)
