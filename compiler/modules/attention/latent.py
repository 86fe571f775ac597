"""attention kind=latent (torch): multi-head latent attention (MLA), causal, as Hugging Face's
DeepseekV3Attention computes it.

    q        q_b(q_norm(q_a(x)))  (or q(x) without q_rank)     [B, N, C] -> [B, h, N, nope + rope]
    latent   kv_a(x) -> kv_norm(c) [B, 1, N, kv_rank], k_rope [B, 1, N, rope] (one rotary key for every head)
    expand   kv_b(c) -> each head's k_nope [B, h, M, nope] and v [B, h, M, v_dim]; k = [k_nope, k_rope]

Rotary positions turn the rope parts of q and k only. The attention is one SDPA call (the value
width may differ from the key's), causal. When generate() hands the forward its cache (`cache`,
a KVCache), it holds the latent and the rotary key, not the expanded keys and values
(compiler/generate/cache.py: KVCache.attend_latent), and the keys and values are expanded from
it at every step.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.latent import LATENT

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from ..common import Linear, make, trunc_normal_linears
from ..norms import RMSNorm
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout
from .form import AttentionForm, written_attention
from .kernel import additive, later_or_outside
from .sequence import Rotary, yarn_args


class LatentAttention(AttentionForm, Sublayer):
    """Multi-head latent attention as a sub-layer (see the module docstring)."""

    takes_cache = True  # generate() hands the forward its KVCache (of the latent)

    score_bias = False  # reads no score bias input (generate asks every cached layer)

    def __init__(self, dim, heads, kv_rank, nope_dim, rope_dim, v_dim, q_rank=None, qkv_bias=False,
                 proj_bias=False, attn_drop=0.0, proj_drop=0.0, latent_eps=1e-6, rope_theta=10000.0,
                 rope_interleaved=True, rope_yarn=None, scale=None, **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.attn_drop = heads, attn_drop
        self.kv_rank, self.nope_dim, self.rope_dim, self.v_dim = kv_rank, nope_dim, rope_dim, v_dim
        self.q_rank, qk = q_rank, nope_dim + rope_dim
        self.scale = qk ** -0.5 if scale is None else scale
        if q_rank is None:
            self.q = Linear(dim, heads * qk, bias=False)  # DeepSeek's single q_proj has no bias (attention_bias or not)
        else:
            self.q_a = Linear(dim, q_rank, bias=qkv_bias)
            self.q_norm = RMSNorm(q_rank, latent_eps)
            self.q_b = Linear(q_rank, heads * qk, bias=False)
        self.kv_a = Linear(dim, kv_rank + rope_dim, bias=qkv_bias)  # the latent and the shared rotary key
        self.kv_norm = RMSNorm(kv_rank, latent_eps)
        self.kv_b = Linear(kv_rank, heads * (nope_dim + v_dim), bias=False)
        self.rotary = Rotary(rope_dim, rope_theta, rope_interleaved, rope_yarn)
        self.proj = Linear(heads * v_dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        trunc_normal_linears(self)

    # -- pieces (generate's cache calls them too) -------------------------------------------
    def queries(self, x):
        """x [B, N, C] -> (q_nope [B, h, N, nope], q_rope [B, h, N, rope])."""
        B, N, _ = x.shape
        q = self.q(x) if self.q_rank is None else self.q_b(self.q_norm(self.q_a(x)))  # [B, N, h*(nope+rope)]
        q = q.reshape(B, N, self.heads, self.nope_dim + self.rope_dim).transpose(1, 2)  # -> [B, h, N, nope+rope]
        return q.split((self.nope_dim, self.rope_dim), dim=-1)

    def latent(self, x):
        """x [B, N, C] -> (the normed latent [B, 1, N, kv_rank], the rotary key [B, 1, N, rope], unrotated)."""
        c, k_rope = self.kv_a(x).split((self.kv_rank, self.rope_dim), dim=-1)  # [B, N, r], [B, N, rope]
        return self.kv_norm(c)[:, None], k_rope[:, None]  # -> [B, 1, N, r], [B, 1, N, rope]

    def expand(self, c, k_rope):
        """The latent [B, 1, M, r] and rotated key [B, 1, M, rope] -> keys [B, h, M, nope + rope],
        values [B, h, M, v]."""
        B, _, M, _ = c.shape
        kv = self.kv_b(c[:, 0])  # [B, M, r] -> [B, M, h*(nope+v)]
        kv = kv.reshape(B, M, self.heads, self.nope_dim + self.v_dim).transpose(1, 2)  # -> [B, h, M, nope+v]
        k_nope, v = kv.split((self.nope_dim, self.v_dim), dim=-1)  # [B, h, M, nope], [B, h, M, v]
        k = torch.cat((k_nope, k_rope.expand(B, self.heads, M, self.rope_dim)), dim=-1)  # -> [B, h, M, nope+rope]
        return k, v

    def sdpa(self, q, k, v, mask=None, causal=False):
        """softmax(q k^T scale + mask) v as one SDPA call: q [B, h, N, qk], k [B, h, M, qk], v [B, h, M, v]
        -> [B, h, N, v]. In an exported program (ONNX, TensorRT) the narrower of the keys and values is
        padded with zeros to the other's width, and the output cut back: TensorRT's attention layer
        takes keys and values of one shape. The zeros change no score and no output."""
        qk, width = q.shape[-1], v.shape[-1]
        if qk != width and torch.compiler.is_exporting():
            wide = max(qk, width)
            q, k = F.pad(q, (0, wide - qk)), F.pad(k, (0, wide - qk))  # [B, h, N, qk] -> [B, h, N, wide]
            v = F.pad(v, (0, wide - width))  # [B, h, M, v] -> [B, h, M, wide]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=attention_dropout(self),
                                             is_causal=causal, scale=self.scale)  # [B, h, N, wide]
        return out[..., :width]  # -> [B, h, N, v]

    def merge(self, out):
        """[B, h, N, v] -> the output projection's [B, N, C]."""
        B, _, N, _ = out.shape
        x = self.proj(out.transpose(1, 2).reshape(B, N, -1))  # [B, h, N, v] -> [B, N, h*v] -> [B, N, C]
        return self.proj_drop(x) if self.proj_drop is not None else x

    # -- forward ------------------------------------------------------------------------------
    def attend(self, x):
        q_nope, q_rope = self.queries(x)
        c, k_rope = self.latent(x)
        q_rope, k_rope = self.rotary(q_rope, k_rope)  # positions 0..N-1
        k, v = self.expand(c, k_rope)
        q = torch.cat((q_nope, q_rope), dim=-1)  # [B, h, N, nope+rope]
        N = q.shape[-2]
        if self.writes_out(N, q):  # the aoti target's CPU export, a CPU compile (form.py)
            mask = additive(later_or_outside(torch.arange(N, device=q.device)[:, None],
                                             torch.arange(N, device=q.device)[None, :]), q.dtype)  # [N, N]
            out = written_attention(q, k, v, mask, self.scale, attention_dropout(self))
        else:
            out = self.sdpa(q, k, v, causal=True)  # [B, h, N, v]
        return self.merge(out)

    def body(self, x, cache=None):
        if cache is not None:  # generate's KVCache: this layer's latent and rotary keys so far
            return cache.attend_latent(self, x)
        return self.attend(x)

    def cache_entry(self) -> tuple[int, int, int]:
        """(heads, key width, value width) generate caches per token: the latent and the rotary key."""
        return 1, self.kv_rank, self.rope_dim


@lowering(LATENT)
def lower(p, inputs, ctx):
    width = inputs[0].channels
    return make(LatentAttention, dim=width, heads=p.heads, kv_rank=p.kv_rank, nope_dim=p.nope_dim,
                rope_dim=p.rope_dim, v_dim=p.v_dim, q_rank=p.q_rank, qkv_bias=p.qkv_bias, proj_bias=p.proj_bias,
                attn_drop=p.attn_drop, proj_drop=p.proj_drop, latent_eps=p.latent_eps, rope_theta=p.rope_theta,
                rope_interleaved=p.rope_interleaved, rope_yarn=yarn_args(p), scale=p.scale, **sublayer_args(p))


register_facts(LATENT, grid=KEEPS, classifier=None, resample=None)
