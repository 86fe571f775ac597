"""score part disentangled (torch): DeBERTa's content-to-position and position-to-content terms
(Hugging Face's DebertaV2 DisentangledSelfAttention.disentangled_attention_bias), computed from
q, k and the shared relative embeddings the node reads, as an additive bias [B, h, N, N] for one
fused SDPA. The relative positions are bucketed as make_log_bucket_position does, at the run's
length (an export keeps the length dynamic)."""

from __future__ import annotations


import torch
import torch.nn as nn
import torch.nn.functional as F

from archspec.primitives.ops.attention.scores.disentangled import DISENTANGLED, deberta_scale, span_of

from ...common import make
from .base import score_module


class Disentangled(nn.Module):
    """The c2p and p2c terms; with `share_keys` the embeddings are projected by the attention's own
    query and key rows (given to `bias`), else by `pos_key_proj` / `pos_query_proj` (HF's names)."""

    reads_tensors = True  # bias(q, k, tensors, attention): the node's named tensors and the attention itself

    def __init__(self, width, heads, head_dim, span, buckets, max_position, terms, share_keys, scale):
        super().__init__()
        self.heads, self.head_dim, self.span, self.scale = heads, head_dim, span, scale
        self.buckets, self.terms, self.share_keys = buckets, tuple(terms), share_keys
        if buckets:  # HF's log-bucket range, in float32 as it computes it
            self.register_buffer("log_range", torch.log(torch.tensor((max_position - 1) / (buckets // 2))),
                                 persistent=False)
        if not share_keys:
            if "c2p" in self.terms:
                self.pos_key_proj = nn.Linear(width, heads * head_dim)
            if "p2c" in self.terms:
                self.pos_query_proj = nn.Linear(width, heads * head_dim)

    def bucketed(self, relative):
        """make_log_bucket_position: offsets within ±mid kept, farther ones log-spaced up to max_position."""
        if not self.buckets:
            return relative
        mid = self.buckets // 2
        sign = torch.sign(relative)
        near = (relative < mid) & (relative > -mid)
        abs_pos = torch.where(near, torch.full_like(relative, mid - 1), relative.abs())  # [N, N]
        log_pos = torch.ceil(torch.log(abs_pos / mid) / self.log_range * (mid - 1)) + mid
        return torch.where(abs_pos <= mid, relative.to(log_pos.dtype), log_pos * sign).long()  # [N, N]

    def positions(self, length: int, device):
        """[N, N] row of the embeddings for each (query i, key j): clamp(bucket(i - j) + span)."""
        ids = torch.arange(length, device=device)
        relative = self.bucketed(ids[:, None] - ids[None, :])  # [N, N]
        return torch.clamp(relative + self.span, 0, 2 * self.span - 1)

    def projected(self, embeddings, attention, role: str):
        """The embeddings [1, 2 span, C] through the query or key projection -> [1, h, 2 span, d]."""
        if self.share_keys:
            inner = self.heads * self.head_dim
            rows = slice(0, inner) if role == "query" else slice(inner, 2 * inner)
            bias = attention.qkv.bias if attention.q_bias is None else torch.cat(
                (attention.q_bias, attention.k_bias, attention.v_bias))
            out = F.linear(embeddings, attention.qkv.weight[rows], None if bias is None else bias[rows])
        else:
            out = (self.pos_query_proj if role == "query" else self.pos_key_proj)(embeddings)
        return out.view(1, -1, self.heads, self.head_dim).transpose(1, 2)  # [1, 2s, h*d] -> [1, h, 2s, d]

    def bias(self, q, k, tensors, attention):
        """q, k [B, h, N, d] -> the terms [B, h, N, N], scaled as DeBERTa scales them. Each term's
        [B, h, N, 2 span] products are picked by one index_select over their flattened rows (as
        torch.gather would, which TensorRT does not convert at a dynamic batch)."""
        embeddings = tensors[0][:, : 2 * self.span]  # [1, 2 span, C]
        B, h, N, _ = q.shape
        rows = 2 * self.span
        index = self.positions(N, q.device)  # [N, N]
        ids = torch.arange(N, device=q.device)
        score = torch.zeros((), dtype=q.dtype, device=q.device)
        if "c2p" in self.terms:  # q_i · Pk[δ(i, j)]: row i of the products
            c2p = q @ self.projected(embeddings, attention, "key").transpose(-1, -2)  # [B, h, N, 2 span]
            picked = c2p.reshape(B, h, -1).index_select(-1, (ids[:, None] * rows + index).reshape(-1))  # [B, h, N*N]
            score = score + picked.view(B, h, N, N)
        if "p2c" in self.terms:  # k_j · Pq[δ(i, j)]: row j of the products
            p2c = k @ self.projected(embeddings, attention, "query").transpose(-1, -2)  # [B, h, N, 2 span]
            picked = p2c.reshape(B, h, -1).index_select(-1, (ids[None, :] * rows + index).reshape(-1))  # [B, h, N*N]
            score = score + picked.view(B, h, N, N)
        return score * self.scale


@score_module(DISENTANGLED)
def make_disentangled(p, site):
    return make(Disentangled, width=site.x.channels, heads=site.heads, head_dim=site.head_dim, span=span_of(p),
                buckets=p.buckets, max_position=p.max_position, terms=tuple(dict.fromkeys(p.terms)),
                share_keys=p.share_keys, scale=deberta_scale(p, site.head_dim))
