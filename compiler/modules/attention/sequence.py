"""The torch side the sequence kinds (global, causal, sliding, cross) share: the projections
(a fused qkv, or q and kv for cross attention), grouped-query attention, separate q/v biases,
query/key normalisation, rotary position embeddings and a key-padding mask. Each kind
subclasses `SequenceAttention` and says which keys a query may see (`mask`).

Rotary embeddings follow the rotate-half convention of GPT-NeoX and Hugging Face's Llama:
dimension d pairs with d + rope_dims/2, over the first rope_dims dims of each head, with
cos/sin computed in float32 from inv_freq = theta^(-2i/rope_dims).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..common import Linear, trunc_normal_linears
from ..norms import RMSNorm
from ..sublayer import Sublayer
from .common import attention_dropout


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """Rotary position embeddings for positions 0..L-1, applied to queries and keys."""

    def __init__(self, dims, theta=10000.0):
        super().__init__()
        self.dims = dims
        inv_freq = 1.0 / (theta ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims))  # [dims/2]
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, k):
        length = q.shape[-2]
        positions = torch.arange(length, device=q.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]  # [L, dims/2]
        angles = torch.cat((freqs, freqs), dim=-1)  # [L, dims]
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin)

    def rotate(self, x, cos, sin):
        if self.dims == x.shape[-1]:
            return x * cos + rotate_half(x) * sin
        turned, kept = x[..., : self.dims], x[..., self.dims:]
        return torch.cat((turned * cos + rotate_half(turned) * sin, kept), dim=-1)


def hidden_keys(padding):
    """A 0/1 key-padding mask [B, M] -> True where a key is hidden, shaped [B, 1, 1, M]."""
    return (padding == 0)[:, None, None, :]


def additive(hidden, dtype):
    """A boolean 'hidden' mask -> an additive mask: 0 where seen, the dtype's minimum where
    hidden (a row with every key hidden then attends uniformly instead of giving NaN)."""
    return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill(hidden, torch.finfo(dtype).min)


class SequenceAttention(Sublayer):
    """Multi-head attention over a sequence, as a sub-layer; subclasses choose the mask."""

    causal = False  # the kind's mask is the plain causal one: SDPA's is_causal when nothing else is masked

    def __init__(self, dim, heads, qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0, kv_heads=None,
                 qk_norm="none", qk_norm_eps=1e-6, rope_theta=None, rope_dims=None, fused=True, **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.kv_heads, self.attn_drop = heads, kv_heads or heads, attn_drop
        self.head_dim = dim // heads
        kv_width = self.head_dim * self.kv_heads
        self.widths = (dim, kv_width, kv_width)
        bias = qkv_bias is True
        if fused:
            self.qkv = Linear(dim, dim + 2 * kv_width, bias=bias)
        else:  # queries from one stream, keys and values from another (cross attention)
            self.q = Linear(dim, dim, bias=bias)
            self.kv = Linear(dim, 2 * kv_width, bias=bias)
        if qkv_bias == "qv":  # biases for queries and values only
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.register_buffer("k_bias", torch.zeros(kv_width), persistent=False)
            self.v_bias = nn.Parameter(torch.zeros(kv_width))
        else:
            self.q_bias = None
        if qk_norm == "none":
            self.q_norm = self.k_norm = None
        elif qk_norm == "rms":
            self.q_norm, self.k_norm = RMSNorm(self.head_dim, qk_norm_eps), RMSNorm(self.head_dim, qk_norm_eps)
        else:
            self.q_norm = nn.LayerNorm(self.head_dim, eps=qk_norm_eps)
            self.k_norm = nn.LayerNorm(self.head_dim, eps=qk_norm_eps)
        self.rotary = Rotary(rope_dims or self.head_dim, rope_theta) if rope_theta is not None else None
        self.proj = Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        trunc_normal_linears(self)

    # -- pieces -------------------------------------------------------------------------------
    def split_heads(self, x, heads):
        B, N, _ = x.shape
        return x.reshape(B, N, heads, self.head_dim).transpose(1, 2)  # [B, N, h*d] -> [B, h, N, d]

    def project(self, x, memory=None):
        """q [B, h, N, d], k and v [B, h_kv, M, d]."""
        if memory is None:
            if self.q_bias is None:
                qkv = self.qkv(x)
            else:
                qkv = self.qkv.activate(x, bias=torch.cat((self.q_bias, self.k_bias, self.v_bias)))
            q, k, v = qkv.split(self.widths, dim=-1)  # [B, N, h*d], 2 x [B, N, h_kv*d]
        else:
            q = self.q(x) if self.q_bias is None else F.linear(x, self.q.weight, self.q_bias)
            kv = self.kv(memory) if self.q_bias is None else F.linear(
                memory, self.kv.weight, torch.cat((self.k_bias, self.v_bias)))
            k, v = kv.split(self.widths[1:], dim=-1)  # 2 x [B, M, h_kv*d]
        return self.split_heads(q, self.heads), self.split_heads(k, self.kv_heads), self.split_heads(v, self.kv_heads)

    def share_kv(self, t):
        """Keys or values of h_kv heads repeated for the h query heads that use them."""
        if self.kv_heads == self.heads:
            return t
        B, h_kv, M, d = t.shape
        group = self.heads // h_kv
        return t[:, :, None].expand(B, h_kv, group, M, d).reshape(B, self.heads, M, d)  # [B, h, M, d]

    def hidden(self, q_len, k_len, device):
        """True where query i may not see key j ([q_len, k_len]), or None: every key is seen."""
        return None

    def mask(self, q_len, k_len, padding, dtype, device):
        """(attn_mask, is_causal) for SDPA: the kind's own mask and the padded keys, together."""
        hidden = self.hidden(q_len, k_len, device)
        if padding is None:
            if hidden is None or self.causal:
                return None, hidden is not None  # SDPA's own causal mask
            return additive(hidden, dtype), False
        padded = hidden_keys(padding)  # [B, 1, 1, M]
        return additive(padded if hidden is None else padded | hidden, dtype), False

    # -- forward ------------------------------------------------------------------------------
    def attend(self, x, memory=None, padding=None):
        B, N, C = x.shape
        q, k, v = self.project(x, memory)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:
            q, k = self.rotary(q, k)
        k, v = self.share_kv(k), self.share_kv(v)
        attn_mask, is_causal = self.mask(N, k.shape[-2], padding, q.dtype, x.device)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=attention_dropout(self),
                                           is_causal=is_causal)
        x = self.proj(x.transpose(1, 2).reshape(B, N, C))  # [B, h, N, d] -> [B, N, C]
        return self.proj_drop(x) if self.proj_drop is not None else x


class SelfAttention(SequenceAttention):
    """Queries, keys and values from one sequence."""

    def body(self, x, padding=None):
        return self.attend(x, padding=padding)


def sequence_args(p, width: int) -> dict:
    """The constructor arguments the sequence options add."""
    return dict(kv_heads=p.kv_heads, qk_norm=p.qk_norm, qk_norm_eps=p.qk_norm_eps, rope_theta=p.rope_theta,
                rope_dims=p.rope_dims)
