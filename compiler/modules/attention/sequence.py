"""The torch side the sequence kinds (global, causal, sliding, cross) share: the projections
(a fused qkv, or q and kv for cross attention), grouped-query attention, separate q/v biases,
query/key normalisation, rotary position embeddings and a key-padding mask. Each kind
subclasses `SequenceAttention` and says which keys a query may see (`mask`).

Rotary embeddings follow the rotate-half convention of GPT-NeoX and Hugging Face's Llama:
dimension d pairs with d + rope_dims/2, over the first rope_dims dims of each head, with
cos/sin computed in float32 from inv_freq = theta^(-2i/rope_dims). With `rope_interleaved` the
pairs are (2i, 2i + 1) instead, as GPT-J and Meta's own Llama code turn them. With `rope_yarn`
(YaRN, GPT-OSS) inv_freq is Hugging Face's `_compute_yarn_parameters`: blended between
interpolation (divided by the factor) and extrapolation along a linear ramp between the
correction dims of beta_fast and beta_slow, and cos and sin are multiplied by the attention
factor (in `rotate`, which generate's cache calls too).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.sequence import score_tensors

from ..common import Linear, make, trunc_normal_linears
from ..norms import RMSNorm
from ..sublayer import Sublayer, sublayer_args
from .common import attention_dropout, common_args, merge_heads
from .form import AttentionForm, softmax_written
from .scores.rotary_grid import turn_halves, turn_pairs
from .scores.base import ScoreIndex, install_score_parts, score_part_names


class Rotary(nn.Module):
    """Rotary position embeddings for positions 0..L-1, applied to queries and keys: the pairs
    (i, i + dims/2), or (2i, 2i + 1) when `interleaved`."""

    def __init__(self, dims, theta=10000.0, interleaved=False, yarn=None):
        super().__init__()
        self.dims, self.interleaved = dims, interleaved
        if yarn is None:
            inv_freq = 1.0 / (theta ** (torch.arange(0, dims, 2, dtype=torch.int64).float() / dims))  # [dims/2]
            self.factor = 1.0
        else:
            inv_freq, self.factor = yarn_frequencies(dims, theta, **yarn)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, k):
        length = q.shape[-2]
        positions = torch.arange(length, device=q.device, dtype=torch.float32)
        angles = self.spread(positions[:, None] * self.inv_freq[None, :])  # [L, dims/2] -> [L, dims]
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin)

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


def hidden_keys(padding):
    """A 0/1 key-padding mask [B, M] -> True where a key is hidden, shaped [B, 1, 1, M]."""
    return (padding == 0)[:, None, None, :]


def later_or_outside(query, key, window=None):
    """True where a key may not be seen by a query: it comes later, or (with a window) `window`
    or more places before it. `query` and `key`: broadcastable slot indices (e.g. [N, 1], [1, M])."""
    hidden = key > query
    return hidden if window is None else hidden | (key <= query - window)


def additive(hidden, dtype):
    """A boolean 'hidden' mask -> an additive mask: 0 where seen, the dtype's minimum where
    hidden (a row with every key hidden then attends uniformly instead of giving NaN)."""
    return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill(hidden, torch.finfo(dtype).min)


class SequenceAttention(AttentionForm, Sublayer):
    """Multi-head attention over a sequence, as a sub-layer; subclasses choose the mask."""

    causal = False  # the kind's mask is the plain causal one: SDPA's is_causal when nothing else is masked

    def __init__(self, dim, heads, qkv_bias=True, proj_bias=True, attn_drop=0.0, proj_drop=0.0, kv_heads=None,
                 qk_norm="none", qk_norm_eps=1e-6, rope_theta=None, rope_dims=None, rope_interleaved=False,
                 rope_yarn=None,
                 fused=True, head_dim=None,
                 scale=None, score_bias=False, score_parts=(), score_tensors=0, kv_dim=None,
                 merge_heads="head_major", **sublayer):
        super().__init__(dim, **sublayer)
        self.heads, self.kv_heads, self.attn_drop = heads, kv_heads or heads, attn_drop
        self.head_dim = head_dim or dim // heads
        self.scale = scale  # None: 1/sqrt(head_dim)
        self.merge_heads = merge_heads  # the heads' outputs as (heads, head_dim), or (head_dim, heads): NesT
        self.score_bias = score_bias  # reads an additive score bias before the padding mask
        self.score_parts = tuple(score_parts)  # children of these names, installed after construction
        self.score_tensors = score_tensors  # inputs the parts read by name, after the score bias
        inner, kv_width = self.head_dim * heads, self.head_dim * self.kv_heads
        self.widths = (inner, kv_width, kv_width)
        bias = qkv_bias is True
        if fused:
            self.qkv = Linear(dim, inner + 2 * kv_width, bias=bias)
        else:  # queries from one stream, keys and values from another (cross attention)
            self.q = Linear(dim, inner, bias=bias)
            self.kv = Linear(kv_dim or dim, 2 * kv_width, bias=bias)  # kv_dim: the memory's width (kdim)
        if qkv_bias == "qv":  # biases for queries and values only
            self.q_bias = nn.Parameter(torch.zeros(inner))
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
        self.rotary = Rotary(rope_dims or self.head_dim, rope_theta, rope_interleaved,
                             rope_yarn) if rope_theta is not None else None
        self.proj = Linear(inner, dim, bias=proj_bias)
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
            return self.queries(x), *self.memory_keys_values(memory)
        return self.split_heads(q, self.heads), self.split_heads(k, self.kv_heads), self.split_heads(v, self.kv_heads)

    def queries(self, x):
        """Cross attention's queries [B, h, N, d] from x [B, N, C]."""
        q = self.q(x) if self.q_bias is None else F.linear(x, self.q.weight, self.q_bias)  # [B, N, h*d]
        return self.split_heads(q, self.heads)

    def memory_keys_values(self, memory):
        """Cross attention's keys and values [B, h_kv, M, d] from memory [B, M, C]."""
        kv = self.kv(memory) if self.q_bias is None else F.linear(
            memory, self.kv.weight, torch.cat((self.k_bias, self.v_bias)))
        k, v = kv.split(self.widths[1:], dim=-1)  # 2 x [B, M, h_kv*d]
        return self.split_heads(k, self.kv_heads), self.split_heads(v, self.kv_heads)

    def share_kv(self, t):
        """Keys or values of h_kv heads repeated for the h query heads that use them."""
        if self.kv_heads == self.heads:
            return t
        B, h_kv, M, d = t.shape
        group = self.heads // h_kv
        return t[:, :, None].expand(B, h_kv, group, M, d).reshape(B, self.heads, M, d)  # [B, h, M, d]

    def hidden(self, q_len, k_len, device):
        """True where query i may not see key j ([q_len, k_len]), or None: every key is seen."""
        i = torch.arange(q_len, device=device)[:, None]
        j = torch.arange(k_len, device=device)[None, :]
        return self.hides(i, j)  # [q_len, k_len] or None

    def hides(self, query, key):
        """The kind's mask (hidden_at) and the parts' (`hides`: local_window), True where the key is
        hidden from the query, at broadcastable indices; None: every key is seen."""
        hidden = self.hidden_at(query, key)
        for part in self.masking_parts():
            found = part.hides(query, key)
            hidden = found if hidden is None else hidden | found
        return hidden

    def masking_parts(self) -> list:
        return [getattr(self, name) for name in self.score_parts if hasattr(getattr(self, name), "hides")]

    def hidden_at(self, query, key):
        """The kind's mask as a function of the indices (broadcastable tensors): True where the
        key is hidden from the query, or None: every key is seen. flex_attention's score_mod asks
        it at each score (sequence.py: flexed); a kind whose mask is more than this overrides
        `mask` and `flex_mask` (alibi)."""
        return None

    def mask(self, q_len, k_len, padding, dtype, device):
        """(attn_mask, is_causal) for SDPA: the kind's own mask and the padded keys, together."""
        hidden = self.hidden(q_len, k_len, device)
        if padding is None:
            if hidden is None or (self.causal and not self.masking_parts()):
                return None, hidden is not None  # SDPA's own causal mask
            return additive(hidden, dtype), False
        padded = hidden_keys(padding)  # [B, 1, 1, M]
        if hidden is None:  # one row per query, as ONNX Runtime's Attention op requires of a mask
            return additive(padded.expand(-1, -1, q_len, -1), dtype), False  # [B, 1, N, M]
        return additive(padded | hidden, dtype), False  # [B, 1, N, M]

    def additive_mask(self, q_len, k_len, padding, dtype, device):
        """The kind's mask and the padded keys as one additive mask (SDPA's causal flag made
        explicit), or None."""
        attn_mask, is_causal = self.mask(q_len, k_len, padding, dtype, device)
        return additive(self.hidden(q_len, k_len, device), dtype) if is_causal else attn_mask

    def split_extra(self, extra):
        """The inputs after the token streams -> (score bias or None, padding mask or None); the
        parts' tensors between them are `parts_tensors(extra)`."""
        bias = extra[0] if self.score_bias else None
        after = self.score_bias + self.score_tensors
        padding = extra[after] if len(extra) > after else None
        return bias, padding

    def parts_tensors(self, extra) -> tuple:
        """The inputs the score parts read by name (`mod`'s tensors), in order."""
        return tuple(extra[self.score_bias: self.score_bias + self.score_tensors])

    def rotate_parts(self, q, k):
        """q and k turned by the score parts that rotate them (2-D rotary positions), in order."""
        for name in self.score_parts:
            part = getattr(self, name)
            if hasattr(part, "rotate"):
                q, k = part.rotate(q, k)  # [B, h, N, d], [B, h_kv, M, d]: shapes kept
        return q, k

    def position_bias(self, q, k, bias, tensors=()):
        """The additive score biases: the bias input and the parts' biases ([B, h, N, M]), or None; a
        part with `reads_tensors` (disentangled) is also given the named tensors and this module."""
        for name in self.score_parts:
            part = getattr(self, name)
            if hasattr(part, "bias"):
                b = part.bias(q, k, tensors, self) if getattr(part, "reads_tensors", False) else part.bias(q, k)
                bias = b if bias is None else bias + b
        return bias

    def score_steps(self) -> list:
        """The parts that change the scores themselves (`before_softmax` / `after_softmax`, or a
        `sink_logit` column in the softmax), in order: the attention is then written out."""
        parts = [getattr(self, name) for name in self.score_parts]
        return [part for part in parts if hasattr(part, "before_softmax") or hasattr(part, "sink_logit")]

    def mixes_scores(self) -> bool:
        return bool(self.score_steps())

    def written_out(self, q, k, v, bias, padding, tensors=()):
        """softmax(q·k^T · scale + bias) · v with the parts' steps around the softmax (see `scored`),
        the kind's mask and the padded keys hidden, the indices those of the slots."""
        mask = self.additive_mask(q.shape[-2], k.shape[-2], padding, q.dtype, q.device)
        return self.scored(q, k, v, bias, mask, ScoreIndex.of_slots(q, k, tensors))

    def scored(self, q, k, v, bias, mask, index):
        """softmax(q·k^T · scale + bias) · v with the parts' steps around the softmax, in their
        order, and the mask added after those before it (timm TalkingHeadAttn's, Gemma 2's soft-cap
        order); a part's `sink_logit` [h] joins the softmax as one more column, dropped after it
        (GPT-OSS's sinks). q [B, h, N, d], k and v [B, h, M, d] (shared already), mask [B or 1,
        1 or h, N, M] or None, index: the ScoreIndex of the scores (slots, or positions while
        generate decodes). Shared by the forward and generate's cache (compiler/generate/cache.py)."""
        scale = self.head_dim ** -0.5 if self.scale is None else self.scale
        scores = (q * scale) @ k.transpose(-2, -1)  # [B, h, N, M]
        if bias is not None:
            scores = scores + bias
        parts = self.score_steps()
        for part in parts:
            if hasattr(part, "before_softmax"):
                scores = part.before_softmax(scores, index) if getattr(part, "reads_index", False) \
                    else part.before_softmax(scores)
        if mask is not None:
            scores = scores + mask
        B, h, N, _ = scores.shape
        sinks = sink_columns(parts, B, h, N, scores.dtype)  # each [B, h, N, 1]
        if sinks:
            scores = torch.cat([scores, *sinks], dim=-1)  # [B, h, N, M + sinks]
        weights = softmax_written(scores) if self.written else scores.softmax(dim=-1)  # form.py: why
        if sinks:
            weights = weights[..., : weights.shape[-1] - len(sinks)]  # [B, h, N, M]: the sinks' columns dropped
        for part in parts:
            if hasattr(part, "after_softmax"):
                weights = part.after_softmax(weights)
        weights = F.dropout(weights, attention_dropout(self))
        return weights @ v  # [B, h, N, d]

    def flexes(self, q, k, bias) -> bool:
        """Whether the parts run fused, as flex_attention's score_mod: under torch.compile (not
        torch.export, whose ONNX and TensorRT targets have no such kernel), with no score bias and
        no dropout, and every part an element-wise `modify` of the score (softcap, mod). Inductor's
        CPU kernel (torch 2.14) takes static sizes and heads of 16 or more: it fails to compile at a
        dynamic length (a C++ error) or a head of 8 (no kernel), so those stay written out."""
        if not torch.compiler.is_compiling() or torch.compiler.is_exporting() or self.written:
            return False
        if q.device.type == "cpu" and (self.head_dim < 16 or not all(
                isinstance(size, int) for size in (*q.shape, *k.shape))):
            return False
        if type(self).mask is not SequenceAttention.mask:
            return False  # a mask of its own beyond hidden_at (alibi's biases): written out
        parts = self.score_steps()
        return bias is None and attention_dropout(self) == 0 and all(
            hasattr(part, "modify") and not hasattr(part, "after_softmax") and not hasattr(part, "sink_logit")
            for part in parts)

    def sinks_alone(self) -> bool:
        """Whether the only parts that change the scores are sinks (a `sink_logit` each): the
        attention then stays one SDPA call (`sunk`)."""
        steps = self.score_steps()
        return bool(steps) and all(hasattr(part, "sink_logit") and not hasattr(part, "before_softmax")
                                   and not hasattr(part, "after_softmax") for part in steps)

    def sunk(self, q, k, v, bias, padding):
        """The sinks inside one SDPA call: each sink is one more key whose key and value are zeros
        (its score q·0 is 0) and whose column of the additive mask is the sink's logit, so the
        softmax holds it in the denominator and it adds nothing to the output, as `scored` writes
        out (GPT-OSS). q [B, h, N, d], k and v [B, h, M, d] (shared already) -> [B, h, N, d]."""
        B, h, N, d = q.shape
        M = k.shape[-2]
        mask = self.additive_mask(N, M, padding, q.dtype, q.device)  # [B or 1, 1, N, M] or None
        if bias is not None:
            mask = bias.to(q.dtype) if mask is None else mask + bias
        rows = (q.new_zeros(1, 1, N, M) if mask is None else mask).expand(B, h, N, M)  # [B, h, N, M]
        sinks = sink_columns(self.score_steps(), B, h, N, q.dtype)  # each [B, h, N, 1]
        mask = torch.cat([rows, *sinks], dim=-1)  # [B, h, N, M + sinks]
        zeros = q.new_zeros(B, h, len(sinks), d)  # [B, h, sinks, d]
        k, v = torch.cat([k, zeros], dim=-2), torch.cat([v, zeros.to(v.dtype)], dim=-2)  # [B, h, M + sinks, d]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=attention_dropout(self),
                                              scale=self.scale)  # [B, h, N, d]

    def flexed(self, q, k, v, padding, tensors=()):
        """The attention as one flex_attention call: the parts' `modify` steps and the kind's mask
        (with the padded keys) as its score_mod, over the same q [B, h, N, d], k, v [B, h, M, d]."""
        from torch.nn.attention.flex_attention import flex_attention

        from torch.nn.attention.flex_attention import create_block_mask

        parts = self.score_steps()
        named = [dict(zip(getattr(part, "tensors", ()), tensors)) for part in parts]
        lowest = torch.finfo(q.dtype).min

        def score_mod(score, b, h, q_idx, kv_idx):
            for part, found in zip(parts, named):
                score = part.modify(score, b, h, q_idx, kv_idx, found)
            if padding is None:
                return score
            return torch.where(padding[b, kv_idx] == 0, lowest, score)  # a padded key

        def mask_mod(b, h, q_idx, kv_idx):  # the kind's and the parts' masks, from the indices
            return ~self.hides(q_idx, kv_idx)

        masked = type(self).hidden_at is not SequenceAttention.hidden_at or self.masking_parts()
        blocks = create_block_mask(mask_mod, None, None, q.shape[-2], k.shape[-2], device=q.device) if masked else None
        scale = self.head_dim ** -0.5 if self.scale is None else self.scale
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=blocks, scale=scale)  # [B, h, N, d]

    # -- forward ------------------------------------------------------------------------------
    def attend(self, x, memory=None, padding=None, bias=None, tensors=()):
        B, N, C = x.shape
        q, k, v = self.project(x, memory)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:
            q, k = self.rotary(q, k)
        q, k = self.rotate_parts(q, k)
        k, v = self.share_kv(k), self.share_kv(v)
        bias = self.position_bias(q, k, bias, tensors)
        if self.mixes_scores() and self.flexes(q, k, bias):
            x = self.flexed(q, k, v, padding, tensors)
        elif self.sinks_alone() and not self.writes_out(k.shape[-2], q.dtype):
            x = self.sunk(q, k, v, bias, padding)
        elif self.mixes_scores() or self.writes_out(k.shape[-2], q.dtype):
            x = self.written_out(q, k, v, bias, padding, tensors)
        else:
            attn_mask, is_causal = self.mask(N, k.shape[-2], padding, q.dtype, x.device)
            if bias is not None:
                mask = self.additive_mask(N, k.shape[-2], padding, q.dtype, x.device)
                attn_mask, is_causal = (bias.to(q.dtype) if mask is None else mask + bias), False
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=attention_dropout(self),
                                               is_causal=is_causal, scale=self.scale)
        if self.merge_heads == "head_major":
            x = self.proj(x.transpose(1, 2).reshape(B, N, -1))  # [B, h, N, d] -> [B, N, h*d]
        else:
            x = self.proj(merge_heads(x, self.merge_heads))  # [B, h, N, d] -> [B, N, d*h]
        return self.proj_drop(x) if self.proj_drop is not None else x


def sink_columns(parts, B, h, N, dtype) -> list:
    """Each sink part's logit [h] among `parts` as one more score column [B, h, N, 1] (GPT-OSS), in order."""
    return [part.sink_logit().to(dtype).view(1, h, 1, 1).expand(B, h, N, 1)  # [h] -> [B, h, N, 1]
            for part in parts if hasattr(part, "sink_logit")]


class SelfAttention(SequenceAttention):
    """Queries, keys and values from one sequence."""

    def body(self, x, *extra):
        bias, padding = self.split_extra(extra)
        return self.attend(x, padding=padding, bias=bias, tensors=self.parts_tensors(extra))


def sequence_args(p, width: int) -> dict:
    """The constructor arguments the sequence options add."""
    return dict(kv_heads=p.kv_heads, qk_norm=p.qk_norm, qk_norm_eps=p.qk_norm_eps, rope_theta=p.rope_theta,
                rope_dims=p.rope_dims, rope_interleaved=p.rope_interleaved, rope_yarn=yarn_args(p),
                head_dim=p.head_dim, scale=p.scale,
                score_bias=p.bias, score_parts=score_part_names(p), score_tensors=len(score_tensors(p)))


def yarn_args(p) -> dict | None:
    """YaRN's options as yarn_frequencies' keywords, or None: plain rotary."""
    if getattr(p, "rope_yarn", None) is None:
        return None
    return dict(factor=p.rope_yarn, original_length=p.rope_original_length, beta_fast=p.rope_beta_fast,
                beta_slow=p.rope_beta_slow, truncate=p.rope_truncate, attention_factor=p.rope_attention_factor)


def make_sequence_attention(cls, op, p, inputs, **extra):
    """The attention module of a sequence kind's node, with its score parts installed."""
    width = inputs[0].channels
    module = make(cls, **common_args(p, width), **sequence_args(p, width), **sublayer_args(p), **extra)
    return install_score_parts(module, p, op.score_site(p, inputs))


def attention_fusion(p) -> str | None:
    """ONNX Runtime fuses the attention unless a score part writes it out."""
    from archspec.primitives.ops.attention.scores.base import parse_scores

    return None if any(use.part.explicit for use in parse_scores(p.scores)) else "attention"
