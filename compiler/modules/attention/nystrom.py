"""attention kind=nystrom (torch): Nyström self-attention as Hugging Face's
NystromformerSelfAttention (archspec/primitives/ops/attention/nystrom.py has the formula): the
queries and keys each scaled by head_dim^-1/4, segment-mean landmarks, three softmaxes, an
iterative pseudo-inverse and a depthwise conv of the values along the tokens. Written out as
plain products (there is no fused kernel for it); generate does not run it (it mixes every token)."""

from __future__ import annotations

import torch
import torch.nn as nn

from archspec.primitives.ops.attention.nystrom import NYSTROM

from ...facts import KEEPS, register_facts
from ...lowering_rules import lowering
from .kernel import additive, hidden_keys
from .sequence import SelfAttention, make_sequence_attention


class NystromAttention(SelfAttention):
    """SelfAttention whose kernel is Nyström's (see the module docstring)."""

    def __init__(self, dim, heads, landmarks, conv_kernel=None, pinv_iters=6, pinv_init="original", **attention):
        super().__init__(dim, heads, **attention)
        self.landmarks, self.pinv_iters, self.pinv_init = landmarks, pinv_iters, pinv_init
        self.conv = None if conv_kernel is None else nn.Conv2d(
            heads, heads, (conv_kernel, 1), padding=(conv_kernel // 2, 0), bias=False, groups=heads)

    def attend(self, x, memory=None, padding=None, bias=None, tensors=(), positions=()):
        q, k, v = self.project(x, memory, positions)  # [B, h, N, d]
        B, N = q.shape[0], q.shape[2]
        q, k = self.normed(q, k, after_rotary=False)
        q, k = self.normed(q, k, after_rotary=True)
        root = (q.shape[-1] ** -0.5 if self.scale is None else self.scale) ** 0.5  # each of q and k: scale^1/2
        q, k = q * root, k * root
        mask = None if padding is None else additive(hidden_keys(padding), q.dtype)  # [B, 1, 1, N]
        out = self.plain(q, k, v, mask) if self.landmarks == N else self.through_landmarks(q, k, v, mask)
        if self.conv is not None:
            out = out + self.conv(v)  # [B, h, N, d]: along the tokens, per head
        return self.projected_out(out, B, N)

    def plain(self, q, k, v, mask):
        """softmax(q k^T + mask) v: as many landmarks as tokens."""
        scores = q @ k.transpose(-1, -2)  # [B, h, N, N]
        return (scores if mask is None else scores + mask).softmax(dim=-1) @ v  # [B, h, N, d]

    def through_landmarks(self, q, k, v, mask):
        """F pinv(A) (B v) over the segment-mean landmarks."""
        B, h, N, d = q.shape
        m = self.landmarks
        q_marks = q.reshape(B, h, m, N // m, d).mean(dim=-2)  # [B, h, m, d]
        k_marks = k.reshape(B, h, m, N // m, d).mean(dim=-2)  # [B, h, m, d]
        near = (q @ k_marks.transpose(-1, -2)).softmax(dim=-1)  # F [B, h, N, m]
        among = (q_marks @ k_marks.transpose(-1, -2)).softmax(dim=-1)  # A [B, h, m, m]
        scores = q_marks @ k.transpose(-1, -2)  # [B, h, m, N]
        far = (scores if mask is None else scores + mask).softmax(dim=-1)  # B [B, h, m, N]
        return (near @ self.pseudo_inverse(among)) @ (far @ v)  # [B, h, N, m] @ [B, h, m, d] -> [B, h, N, d]

    def pseudo_inverse(self, a):
        """The iterative Moore-Penrose inverse of the softmax `a` [B, h, m, m], Hugging Face's iterative_inv."""
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)  # [m, m]
        column_sums = a.sum(dim=-2)  # [B, h, m]
        if self.pinv_init == "original":  # the whole batch's largest column sum, as Hugging Face's default
            z = a.transpose(-1, -2) / column_sums.max()  # [B, h, m, m]
        else:
            z = a.transpose(-1, -2) / column_sums.amax(dim=-1)[:, :, None, None]  # [B, h, m, m]
        for _ in range(self.pinv_iters):
            az = a @ z  # [B, h, m, m]
            z = (0.25 * z) @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))  # [B, h, m, m]
        return z

    def extra_repr(self) -> str:
        return f"landmarks={self.landmarks}, pinv_iters={self.pinv_iters}, pinv_init={self.pinv_init!r}"


@lowering(NYSTROM)
def lower(p, inputs, ctx):
    return make_sequence_attention(NystromAttention, NYSTROM, p, inputs, landmarks=p.landmarks,
                                   conv_kernel=p.conv_kernel, pinv_iters=p.pinv_iters, pinv_init=p.pinv_init)


register_facts(NYSTROM, grid=KEEPS, classifier=None, resample=None)
