"""disentangled: DeBERTa's disentangled attention terms (He et al., 2021; Hugging Face's
DebertaV2 DisentangledSelfAttention), added to the content scores q_i · k_j:

    c2p(i, j) = q_i · Pk[δ(i, j)]     content to position
    p2c(i, j) = k_j · Pq[δ(i, j)]     position to content

where P = R W are the shared relative embeddings R [2·span, C] (given in `from:` after the token
stream, e.g. a param normed once and read by every layer) projected by the attention's own query
and key projections (`share_keys: true`, DeBERTa v3's share_att_key) or by two of the part's
own (`pos_key_proj`, `pos_query_proj`), and δ(i, j) = clamp(bucket(i - j) + span, 0, 2·span - 1)
with DeBERTa's log buckets (span = `buckets`; `buckets: 0`: no buckets, span = max_position).
DeBERTa divides every term by sqrt(head_dim · (1 + terms)): the node's `scale` must say so
(checked), and the part divides its terms by the same. The part gives an additive bias
[B, h, N, N] computed from q and k: the attention stays one fused SDPA.
"""

from __future__ import annotations

import math
from typing import Literal

from .....core.declared import Field
from ....base import Cost, NonNegInt, Params, PositiveInt, RuleError
from ....counting import linear_flops, linear_params
from ....decoding import Mixes
from .....core.suggestions import Remedy
from ....registry import register
from .base import ScorePart, ScoreSite, register_score_decoding


class DisentangledParams(Params):
    embeddings: str = Field(description="name of the relative embeddings [2 x span, C], given in the node's `from:` "
                                        "after the token stream")
    buckets: NonNegInt = Field(256, description="DeBERTa's position_buckets: the span of the log-bucketed relative "
                                                "positions (0: none, the span is max_position)")
    max_position: PositiveInt = Field(512, description="DeBERTa's max_relative_positions: the distance the log "
                                                       "buckets reach at their last one")
    terms: list[Literal["c2p", "p2c"]] = Field(["c2p", "p2c"], min_length=1,
                                               description="content-to-position and position-to-content terms")
    share_keys: bool = Field(True, description="project the embeddings with the attention's own query and key "
                                               "projections (share_att_key); false: with the part's own")

    @property
    def tensors(self) -> tuple[str, ...]:
        return (self.embeddings,)


def span_of(p) -> int:
    return p.buckets if p.buckets > 0 else p.max_position


def deberta_scale(p, head_dim: int) -> float:
    """1 / sqrt(head_dim · (1 + the number of terms)): DeBERTa's scale of every term."""
    return 1.0 / math.sqrt(head_dim * (1 + len(set(p.terms))))


class DisentangledPart(ScorePart):
    """DeBERTa's content-to-position and position-to-content terms from shared relative embeddings
    with log buckets, added to the scores: one bias computed from q and k, fused SDPA."""

    name = "disentangled"
    Params = DisentangledParams
    explicit = False
    adds_bias = True

    def check(self, p, site: ScoreSite) -> None:
        if len(site.tensors) != 1:
            raise RuleError(f"score part 'disentangled' reads one tensor ({p.embeddings}), and this attention gives "
                            f"its parts {len(site.tensors)}", field="scores",
                            hint=Remedy("name the relative embeddings in the node's `from:` after the token stream, "
                                        "and no other part's tensors"))
        if site.keys != site.queries or site.x is None:
            raise RuleError("disentangled attention needs self-attention: its positions are query minus key",
                            field="scores")
        width, span = site.x.channels, span_of(p)
        table = site.tensors[0]
        if table.dtype != "float32" or len(table.shape) != 3 or table.shape[0] != 1 \
                or table.shape[1] != 2 * span or table.shape[2] != width:
            raise RuleError(f"the relative embeddings {p.embeddings!r} must be [1, {2 * span}, {width}] (2 x span "
                            f"rows of the width), got {table.describe()}", field="scores",
                            hint=Remedy(f"a param of shape [{2 * span}, {width}], normed once for every layer"))
        if p.buckets and p.buckets >= p.max_position:
            raise RuleError(f"buckets {p.buckets} must be below max_position {p.max_position}", field="scores",
                            hint=Remedy("DeBERTa's position_buckets (buckets) stay below its max_relative_positions "
                                        f"(max_position): max_position above {p.buckets}, or buckets: 0 for none"))
        want = deberta_scale(p, site.head_dim)
        if site.scale is None or not math.isclose(site.scale, want, rel_tol=1e-6):
            raise RuleError(f"DeBERTa scales every term by 1/sqrt(head_dim x {1 + len(set(p.terms))}) = {want:.9g}, "
                            f"and this attention's scale is {'1/sqrt(head_dim)' if site.scale is None else site.scale}",
                            field="scores", hint=Remedy(f"set `scale: {want:.9g}` on the node"))

    def cost(self, p, site: ScoreSite) -> Cost:
        """The part's own projections (share_keys: false); projecting the 2 x span embeddings and
        each term's products with them (q·Pk^T or k·Pq^T: heads x queries x 2 span x head_dim)."""
        width, span, inner = site.x.channels, span_of(p), site.heads * site.head_dim
        terms = len(set(p.terms))
        params = 0 if p.share_keys else terms * linear_params(width, inner)
        flops = terms * (linear_flops(2 * span, width, inner) + 2 * site.heads * site.queries * 2 * span * site.head_dim)
        return Cost(params, flops)


DISENTANGLED = register(DisentangledPart())
register_score_decoding(DISENTANGLED, Mixes("its terms are gathered from relative positions of the whole sequence "
                                            "(not cached yet)"))
