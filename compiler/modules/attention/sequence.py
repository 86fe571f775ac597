"""The torch side the sequence kinds (global, causal, sliding, alibi, cross, class) share: the projections
(a fused qkv, or q and kv for cross attention), grouped-query attention, separate q/v biases,
query/key normalisation, rotary position embeddings and a key-padding mask, around the
attention kernel (kernel.py), which holds no parameter. A kind is not a subclass: the self-
attention kinds (global, causal, sliding, alibi) are one `SelfAttention` given the kind's mask
rule (kernel.py's AllKeys, causal.py's CausalMask, ...), and generate() hands a kind whose rule
decodes its key/value cache as an argument (`cache`).

Rotary embeddings follow the rotate-half convention of GPT-NeoX and Hugging Face's Llama:
dimension d pairs with d + rope_dims/2, over the first rope_dims dims of each head, with
cos/sin computed in float32 from inv_freq = theta^(-2i/rope_dims). With `rope_interleaved` the
pairs are (2i, 2i + 1) instead, as GPT-J and Meta's own Llama code turn them. With `rope_yarn`
(YaRN, GPT-OSS) inv_freq is Hugging Face's `_compute_yarn_parameters`: blended between
interpolation (divided by the factor) and extrapolation along a linear ramp between the
correction dims of beta_fast and beta_slow, and cos and sin are multiplied by the attention
factor (in `rotate`, which generate's cache calls too). With LongRoPE's factors (Phi-3) each
frequency is divided by its short factor, or by its long factor in a call whose furthest
position is beyond the original length, and cos and sin are multiplied by the attention factor.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.sequence import score_tensors

from ..common import Linear, make, trunc_normal_linears
from .qk_norm import qk_norms
from ..sublayer import Sublayer, sublayer_args
from .common import common_args, merge_heads
from .kernel import AllKeys, AttentionKernel
from .scores.rotary_grid import turn_halves, turn_pairs
from .scores.base import install_score_parts, score_part_names


class Rotary(nn.Module):
    """Rotary position embeddings for positions 0..L-1, applied to queries and keys: the pairs
    (i, i + dims/2), or (2i, 2i + 1) when `interleaved`."""

    def __init__(self, dims, theta=10000.0, interleaved=False, yarn=None, longrope=None, llama3=None, linear=None):
        super().__init__()
        self.dims, self.interleaved = dims, interleaved
        self.long_from = None  # LongRoPE: the furthest position (1-based) beyond which the long factors apply
        powers = theta ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims)  # theta^(2i/d): [dims/2]
        inv_freq, self.factor = 1.0 / powers, 1.0
        if yarn is not None:
            inv_freq, self.factor = yarn_frequencies(dims, theta, **yarn)
        if llama3 is not None:
            inv_freq = llama3_frequencies(inv_freq, **llama3)
        if linear is not None:  # Hugging Face's _compute_linear_scaling_rope_parameters: positions / factor
            inv_freq = inv_freq / linear
        if longrope is not None:  # Hugging Face's _compute_longrope_parameters and longrope_frequency_update
            self.long_from, self.factor = longrope["original_length"], longrope["attention_factor"]
            self.register_buffer("long_inv_freq", 1.0 / (torch.tensor(longrope["long"]) * powers), persistent=False)
            inv_freq = 1.0 / (torch.tensor(longrope["short"]) * powers)  # [dims/2], as Hugging Face's
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, k):
        length = q.shape[-2]
        positions = torch.arange(length, device=q.device, dtype=torch.float32)
        angles = self.spread(positions[:, None] * self.frequencies(positions)[None, :])  # [L, dims/2] -> [L, dims]
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin)

    def frequencies(self, positions):
        """inv_freq [dims/2] for a call at these positions: with LongRoPE the long factors' where the
        furthest position is beyond the original length (one choice for the whole call, as Hugging Face's)."""
        if self.long_from is None:
            return self.inv_freq
        beyond = positions.max() + 1 > self.long_from  # a 0-d tensor: traced, not a Python branch
        return torch.where(beyond, self.long_inv_freq, self.inv_freq)

    def spread(self, freqs):
        """Each pair's angle [..., dims/2] at both dims of the pair -> [..., dims]."""
        return freqs.repeat_interleave(2, dim=-1) if self.interleaved else torch.cat((freqs, freqs), dim=-1)

    def rotate(self, x, cos, sin):
        turn = turn_pairs if self.interleaved else turn_halves
        if self.factor != 1.0:  # YaRN's attention factor, on the tables as Hugging Face applies it
            cos, sin = cos * self.factor, sin * self.factor
        if self.dims == x.shape[-1]:
            return x * cos + turn(x) * sin
        turned, kept = x[..., : self.dims], x[..., self.dims:]
        return torch.cat((turned * cos + turn(turned) * sin, kept), dim=-1)


def llama3_frequencies(inv_freq, factor, low_freq_factor, high_freq_factor, original_length):
    """Llama 3's inv_freq [dims/2], as Hugging Face's _compute_llama3_parameters: frequencies whose
    wavelength exceeds original_length / low_freq_factor divided by `factor`, those below
    original_length / high_freq_factor kept, those between blended by where the wavelength lies."""
    low_freq_wavelen, high_freq_wavelen = original_length / low_freq_factor, original_length / high_freq_factor
    wavelen = 2 * math.pi / inv_freq  # [dims/2]
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_length / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(medium, blended, scaled)


def yarn_frequencies(dims, theta, factor, original_length=4096, beta_fast=32.0, beta_slow=1.0, truncate=True,
                     attention_factor=None):
    """YaRN's inv_freq [dims/2] and attention factor, as Hugging Face's _compute_yarn_parameters
    (modeling_rope_utils.py) computes them: the correction dims where beta_fast and beta_slow
    rotations fit in original_length (floor/ceil with `truncate`, clipped to [0, dims - 1]), a
    linear ramp between them, interpolated frequencies (/ factor) below it, extrapolated above."""
    def correction_dim(rotations):
        return (dims * math.log(original_length / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dims - 1)
    if low == high:
        high += 0.001  # as Hugging Face: no zero-width ramp
    ramp = ((torch.arange(dims // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # [dims/2]
    extrapolated_share = 1 - ramp
    pos_freqs = theta ** (torch.arange(0, dims, 2).to(dtype=torch.float) / dims)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    inv_freq = interpolation * (1 - extrapolated_share) + extrapolation * extrapolated_share
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, float(attention_factor)


class SequenceAttention(Sublayer):
    """Multi-head attention over a sequence, as a sub-layer: the projections and the score parts
    around the attention kernel (`kernel`, given `keys`, the kind's mask rule). `memory_width`:
    None for one qkv projection of x, or the width of the memory the keys and values come from."""

    def __init__(self, dim, heads, qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0, kv_heads=None,
                 qk_norm="none", qk_norm_eps=1e-6, qk_norm_over="head", qk_norm_bias=True, qk_norm_offset=0.0,
                 rotary=None, memory_width=None, head_dim=None, scale=None,
                 score_bias=False, score_parts=(), score_tensors=0, merge_heads="head_major", keys=None,
                 clip_qkv=None, qk_positions=0, qk_norm_affine=True, projections="internal", value_dim=None,
                 batch_from=(0, 1, 2), qk_norm_at="before_rotary", clip_qkv_at="before_qk_norm", **sublayer):
        super().__init__(dim, **sublayer)
        self.external = projections == "external"  # q, k and v are inputs: no projections here (dim: q's width)
        self.batch_from = tuple(batch_from)  # external q, k, v: the stream whose batch each takes (a learned q: k's)
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.clip_qkv = clip_qkv  # None, or the bound the projections' outputs are clamped to (DBRX, OLMo, MPT)
        self.clip_after_norm = clip_qkv_at == "after_qk_norm"  # q and k clamped after qk_norm (HF's OLMoE)
        self.head_dim = head_dim or dim // heads
        self.scale = scale  # None: 1/sqrt(head_dim)
        self.merge_heads = merge_heads  # the heads' outputs as (heads, head_dim), or (head_dim, heads): NesT
        self.score_bias = score_bias  # reads an additive score bias before the padding mask
        self.score_parts = tuple(score_parts)  # children of these names, installed after construction
        self.score_tensors = score_tensors  # inputs the parts read by name, after the score bias
        self.qk_positions = qk_positions  # position inputs after the token streams, added to q's and k's inputs
        inner, kv_width = self.head_dim * heads, self.head_dim * self.kv_heads
        self.value_dim = value_dim or self.head_dim  # each head's value width (external v's may differ)
        self.widths = (inner, kv_width, self.value_dim * self.kv_heads)
        bias = qkv_bias is True
        if self.external:  # made by other nodes; qkv_bias and proj_bias are the rule's to refuse
            pass
        elif memory_width is None:  # queries, keys and values of x: one projection
            self.qkv = Linear(dim, inner + 2 * kv_width, bias=bias)
        else:  # queries of x, keys and values of a memory this wide (cross and class attention; kdim)
            self.q = Linear(dim, inner, bias=bias)
            self.kv = Linear(memory_width, 2 * kv_width, bias=bias)
        if qkv_bias == "qv":  # biases for queries and values only
            self.q_bias = nn.Parameter(torch.zeros(inner))
            self.register_buffer("k_bias", torch.zeros(kv_width), persistent=False)
            self.v_bias = nn.Parameter(torch.zeros(kv_width))
        else:
            self.q_bias = None
        self.q_norm, self.k_norm = qk_norms(qk_norm, qk_norm_over, qk_norm_bias, qk_norm_eps, heads, self.kv_heads,
                                            self.head_dim, qk_norm_offset, qk_norm_affine)
        self.rotary = Rotary(**{"dims": self.head_dim, **rotary}) if rotary is not None else None
        self.qk_norm_at = qk_norm_at  # qk_norm before the rotary positions or after them (HunYuan)
        self.kernel = AttentionKernel(keys or AllKeys(), scale, attn_drop)
        self.proj = Linear(inner, dim, bias=proj_bias) if not self.external else nn.Identity()
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else None
        trunc_normal_linears(self)

    # -- pieces -------------------------------------------------------------------------------
    def split_heads(self, x, heads, width=None):
        B, N, _ = x.shape
        return x.reshape(B, N, heads, width or self.head_dim).transpose(1, 2)  # [B, N, h*d] -> [B, h, N, d]

    def project(self, x, memory=None, positions=()):
        """q [B, h, N, d], k and v [B, h_kv, M, d]; `positions` (qk_positions) are added to the
        queries' and keys' inputs: x's, then the memory's. With external projections x is (q, k,
        v) as the node read them, split into their heads."""
        if self.external:
            q, k, v = self.batched(x)  # [B, N, h*d], [B, M, h_kv*d], [B, M, h_kv*dv]
            return (self.split_heads(q, self.heads), self.split_heads(k, self.kv_heads),
                    self.split_heads(v, self.kv_heads, self.value_dim))  # [B, h, N, d], [B, h_kv, N, d or dv]
        if memory is not None:
            return self.queries(x, *positions[:1]), *self.memory_keys_values(memory, *positions[1:])
        if positions:
            qkv = self.projected_with_positions(x, positions[0])
        elif self.q_bias is None:
            qkv = self.qkv(x)
        else:
            qkv = self.qkv.activate(x, bias=torch.cat((self.q_bias, self.k_bias, self.v_bias)))
        q, k, v = qkv.split(self.widths, dim=-1)  # [B, N, h*d], 2 x [B, N, h_kv*d]
        q, k, v = self.clipped(q), self.clipped(k), self.clipped(v, values=True)
        return self.split_heads(q, self.heads), self.split_heads(k, self.kv_heads), self.split_heads(v, self.kv_heads)

    def batched(self, streams):
        """External q, k, v, a learned one (batch 1) expanded to the batch of the stream batch_from names."""
        return tuple(t if i == own else t.expand(streams[i].shape[0], -1, -1)  # [1, N, C] -> [B, N, C]
                     for own, (i, t) in enumerate(zip(self.batch_from, streams)))

    def projected_with_positions(self, x, positions):
        """qkv [B, N, h*d + 2 h_kv*d] with q and k projected from x + positions, v from x alone
        (DETR's with_pos_embed)."""
        bias = self.qkv.bias if self.q_bias is None else torch.cat((self.q_bias, self.k_bias, self.v_bias))
        qk = sum(self.widths[:2])
        w_qk, w_v = self.qkv.weight[:qk], self.qkv.weight[qk:]
        b_qk, b_v = (None, None) if bias is None else (bias[:qk], bias[qk:])
        return torch.cat((F.linear(x + positions, w_qk, b_qk), F.linear(x, w_v, b_v)), dim=-1)  # [B, N, qk + v]

    def queries(self, x, positions=None):
        """Cross attention's queries [B, h, N, d] from x [B, N, C] (plus its positions, qk_positions)."""
        if positions is not None:
            x = x + positions
        q = self.q(x) if self.q_bias is None else F.linear(x, self.q.weight, self.q_bias)  # [B, N, h*d]
        return self.split_heads(self.clipped(q), self.heads)

    def clipped(self, projected, values=False):
        """A projection's output clamped to [-clip_qkv, clip_qkv] where the node says so: the values
        always, the queries and keys unless they are clamped after qk_norm (`normed`)."""
        if self.clip_qkv is None or (self.clip_after_norm and not values):
            return projected
        return projected.clamp(-self.clip_qkv, self.clip_qkv)

    def memory_keys_values(self, memory, positions=None):
        """Cross attention's keys and values [B, h_kv, M, d] from memory [B, M, C]; with the
        memory's positions (qk_positions) the keys from memory + positions."""
        bias = self.kv.bias if self.q_bias is None else torch.cat((self.k_bias, self.v_bias))
        if positions is None:
            kv = self.kv(memory) if self.q_bias is None else F.linear(memory, self.kv.weight, bias)
            k, v = kv.split(self.widths[1:], dim=-1)  # 2 x [B, M, h_kv*d]
            k, v = self.clipped(k), self.clipped(v, values=True)
        else:
            width = self.widths[1]
            b_k, b_v = (None, None) if bias is None else (bias[:width], bias[width:])
            k = self.clipped(F.linear(memory + positions, self.kv.weight[:width], b_k))  # [B, M, h_kv*d]
            v = self.clipped(F.linear(memory, self.kv.weight[width:], b_v), values=True)  # [B, M, h_kv*d]
        return self.split_heads(k, self.kv_heads), self.split_heads(v, self.kv_heads)

    def share_kv(self, t):
        """Keys or values of h_kv heads repeated for the h query heads that use them."""
        if self.kv_heads == self.heads:
            return t
        B, h_kv, M, d = t.shape
        group = self.heads // h_kv
        return t[:, :, None].expand(B, h_kv, group, M, d).reshape(B, self.heads, M, d)  # [B, h, M, d]

    def value_calls(self, v) -> tuple:
        """The values [B, h_kv, M, d] of each kernel call: one call over them as they are
        (differential.py: a call over each half of the key/value heads)."""
        return (v,)

    def combine_heads(self, outs: tuple):
        """The kernel calls' outputs [B, h, N, d] as the projection reads them: the one call's
        (differential.py: the differences of pairs of heads)."""
        return outs[0]

    def parts(self) -> tuple:
        """The score part modules, in order (the kernel is given them at each call)."""
        return tuple(getattr(self, name) for name in self.score_parts)

    def mixes_scores(self) -> bool:
        """Whether a part changes the scores themselves (the attention is then not plain SDPA)."""
        return self.kernel.mixes_scores(self.parts())

    def split_positions(self, extra) -> tuple[tuple, tuple]:
        """The inputs after the token streams -> (the streams' positions (qk_positions), the rest:
        what split_extra and parts_tensors read)."""
        return tuple(extra[:self.qk_positions]), tuple(extra[self.qk_positions:])

    def split_extra(self, extra):
        """The inputs after the positions -> (score bias or None, padding mask or None); the
        parts' tensors between them are `parts_tensors(extra)`."""
        bias = extra[0] if self.score_bias else None
        after = self.score_bias + self.score_tensors
        padding = extra[after] if len(extra) > after else None
        return bias, padding

    def parts_tensors(self, extra) -> tuple:
        """The inputs the score parts read by name (`mod`'s tensors), in order."""
        return tuple(extra[self.score_bias: self.score_bias + self.score_tensors])

    def rotate_parts(self, q, k, tensors=()):
        """q and k turned by the score parts that rotate them (2-D rotary positions), in order; a
        part with `reads_tensors` is given the named tensors (rotary_grid's prefix angles)."""
        for part in self.parts():
            if hasattr(part, "rotate"):
                q, k = part.rotate(q, k, tensors) if getattr(part, "reads_tensors", False) else part.rotate(q, k)
        return q, k  # [B, h, N, d], [B, h_kv, M, d]: shapes kept

    def position_bias(self, q, k, bias, tensors=()):
        """The additive score biases: the bias input and the parts' biases ([B, h, N, M]), or None; a
        part with `reads_tensors` (disentangled) is also given the named tensors and this module."""
        for part in self.parts():
            if hasattr(part, "bias"):
                b = part.bias(q, k, tensors, self) if getattr(part, "reads_tensors", False) else part.bias(q, k)
                bias = b if bias is None else bias + b
        return bias

    def normed(self, q, k, after_rotary: bool):
        """q and k through qk_norm where it stands at this point: before the rotary positions turn
        them or after (qk_norm_at), then clamped where clip_qkv_at says after_qk_norm; as they were
        elsewhere."""
        if self.q_norm is None or after_rotary != (self.qk_norm_at == "after_rotary"):
            return q, k
        q, k = self.q_norm(q), self.k_norm(k)
        if self.clip_after_norm:
            return q.clamp(-self.clip_qkv, self.clip_qkv), k.clamp(-self.clip_qkv, self.clip_qkv)
        return q, k

    # -- forward ------------------------------------------------------------------------------
    def attend(self, x, memory=None, padding=None, bias=None, tensors=(), positions=()):
        q, k, v = self.project(x, memory, positions)
        B, N = q.shape[0], q.shape[2]
        q, k = self.normed(q, k, after_rotary=False)
        if self.rotary is not None:
            q, k = self.rotary(q, k)
        q, k = self.rotate_parts(q, k, tensors)
        q, k = self.normed(q, k, after_rotary=True)
        k = self.share_kv(k)
        bias = self.position_bias(q, k, bias, tensors)
        x = self.combine_heads(tuple(self.kernel(q, k, self.share_kv(values), bias, padding, self.parts(), tensors)
                                     for values in self.value_calls(v)))  # [B, h, N, d]
        return self.projected_out(x, B, N)

    def projected_out(self, x, B, N):
        """The heads' outputs [B, h, N, d] merged and through the output projection: [B, N, C]."""
        if self.merge_heads == "head_major":
            x = self.proj(x.transpose(1, 2).reshape(B, N, -1))  # [B, h, N, d] -> [B, N, h*d]
        else:
            x = self.proj(merge_heads(x, self.merge_heads))  # [B, h, N, d] -> [B, N, d*h]
        return self.proj_drop(x) if self.proj_drop is not None else x


class SelfAttention(SequenceAttention):
    """Queries, keys and values from one sequence, the keys each query sees by the kind's rule
    (`keys`). Where the rule decodes (causal, sliding, alibi), generate() hands the forward
    `cache`, this layer's keys and values so far (compiler/generate/cache.py's KVCache), and the
    attention runs through it."""

    @property
    def takes_cache(self) -> bool:
        return self.kernel.keys.decodes

    def body(self, x, *extra, cache=None):
        if self.external:  # x is q; k and v come first among the rest
            x, extra = (x, *extra[:2]), extra[2:]
        positions, extra = self.split_positions(extra)
        bias, padding = self.split_extra(extra)
        if cache is not None:  # the cache's mask hides the padded keys (no kind with positions decodes)
            return cache.attend(self, x, bias, self.parts_tensors(extra))
        return self.attend(x, padding=padding, bias=bias, tensors=self.parts_tensors(extra), positions=positions)

    def cache_entry(self) -> tuple[int, int, int]:
        """(heads, key width, value width) of what generate caches per token: the key/value heads."""
        return self.kv_heads, self.head_dim, self.value_dim


def sequence_args(p, width: int) -> dict:
    """The constructor arguments the sequence options add."""
    return dict(kv_heads=p.kv_heads, qk_norm=p.qk_norm, qk_norm_eps=p.qk_norm_eps, qk_norm_over=p.qk_norm_over,
                qk_norm_bias=p.qk_norm_bias, qk_norm_offset=p.qk_norm_offset, rotary=rotary_args(p),
                head_dim=p.head_dim, scale=p.scale,
                score_bias=p.bias, score_parts=score_part_names(p), score_tensors=len(score_tensors(p)),
                **({"clip_qkv": p.clip_qkv} if p.clip_qkv is not None else {}),  # model.py as before without them
                **({"clip_qkv_at": p.clip_qkv_at} if p.clip_qkv_at == "after_qk_norm" else {}),
                **({"qk_norm_affine": False} if not p.qk_norm_affine else {}),
                **({"qk_norm_at": p.qk_norm_at} if p.qk_norm_at != "before_rotary" else {}))  # model.py as before


def rotary_args(p) -> dict | None:
    """Rotary's keywords (Rotary's; its dims the head width unless the node gives rope_dims), or None: no rotary."""
    if p.rope_theta is None:
        return None
    dims = {"dims": p.rope_dims} if p.rope_dims is not None else {}
    linear = {"linear": p.rope_linear} if getattr(p, "rope_linear", None) is not None else {}  # model.py as before
    return dict(theta=p.rope_theta, **dims, interleaved=p.rope_interleaved, yarn=yarn_args(p),
                longrope=longrope_args(p), llama3=llama3_args(p), **linear)


def llama3_args(p) -> dict | None:
    """Llama 3's scaling as llama3_frequencies' keywords, or None."""
    if getattr(p, "rope_llama3", None) is None:
        return None
    return dict(factor=p.rope_llama3, low_freq_factor=p.rope_low_freq_factor, high_freq_factor=p.rope_high_freq_factor,
                original_length=p.rope_original_length)


def yarn_args(p) -> dict | None:
    """YaRN's options as yarn_frequencies' keywords, or None: plain rotary."""
    if getattr(p, "rope_yarn", None) is None:
        return None
    return dict(factor=p.rope_yarn, original_length=p.rope_original_length, beta_fast=p.rope_beta_fast,
                beta_slow=p.rope_beta_slow, truncate=p.rope_truncate, attention_factor=p.rope_attention_factor)


def longrope_args(p) -> dict | None:
    """LongRoPE's factors, original length and attention factor (Rotary's `longrope`), or None."""
    if getattr(p, "rope_short_factors", None) is None:
        return None
    return dict(short=list(p.rope_short_factors), long=list(p.rope_long_factors),
                original_length=p.rope_original_length, attention_factor=p.rope_attention_factor)


def make_sequence_attention(cls, op, p, inputs, **extra):
    """The attention module of a sequence kind's node, with its score parts installed; with
    external projections no projections, norm or residual of its own (a bare sub-layer)."""
    width = inputs[0].channels
    positions = len(op.positions(p))
    if positions:  # model.py as before without them
        extra["qk_positions"] = positions
    sublayer = sublayer_args(p)
    if getattr(p, "projections", "internal") == "external":  # model.py as before without it
        extra.update(projections="external", value_dim=inputs[2].channels // (p.kv_heads or p.heads))
        batched = next((i for i, t in enumerate(inputs[:3]) if t.shape[0] != 1), None)
        if batched is not None and any(t.shape[0] == 1 for t in inputs[:3]):  # model.py as before without it
            extra["batch_from"] = tuple(i if t.shape[0] != 1 else batched for i, t in enumerate(inputs[:3]))
        sublayer.update(norm="none", residual=False, layer_scale=None, drop_path=0.0, residual_gate="none")
    module = make(cls, **common_args(p, width), **sequence_args(p, width), **sublayer, **extra)
    return install_score_parts(module, p, op.score_site(p, inputs))


def attention_fusion(p) -> str | None:
    """ONNX Runtime fuses the attention unless a score part writes it out."""
    from archspec.primitives.ops.attention.scores.base import parse_scores

    return None if any(use.part.explicit for use in parse_scores(p.scores)) else "attention"
