"""decomposed: 2-D relative positions split into a row part and a column part (MViTv2, SAM).

Each query q at grid cell (y, x) gets, for the key at (y', x'),

    q · R_h[y - y'] + q · R_w[x - x']

added to its score, where R_h [2H - 1, head_dim] and R_w [2W - 1, head_dim] are learned tables of
the relative offsets along the rows and the columns, shared by all heads (timm's `rel_pos_h` and
`rel_pos_w`, `get_decomposed_rel_pos_bias`). The grid is the site's: the token grid for global
attention, the window for window attention, so the tables are 2S - 1 long for a side S of it.
The part gives an additive bias [B, h, N, N]: the attention stays one fused SDPA.

Where the keys lie on a grid of their own (pooled attention, MViTv2: queries and keys pooled
with different strides), the offsets are timm's `cal_rel_pos_type`: the coarser side's index is
scaled up to the finer one's, (y · max(k_h / q_h, 1) - y' · max(q_h / k_h, 1)), and the tables
are 2 · max(q_h, k_h) - 1 long (and so for the columns).
"""

from __future__ import annotations

from ....base import Cost, Params, RuleError
from ....counting import INDEX_BYTES
from .....core.suggestions import Remedy
from ....registry import register
from .base import ScorePart, ScoreSite


class DecomposedParams(Params):
    pass


class DecomposedPart(ScorePart):
    """q · R_h[Δrow] + q · R_w[Δcolumn] added to the scores: learned tables of the relative row and
    column offsets over the site's grid (the window, for window kinds), one bias, fused SDPA."""

    name = "decomposed"
    one_grid = "decomposed's position tables"
    Params = DecomposedParams
    explicit = False
    adds_bias = True

    def check(self, p, site: ScoreSite) -> None:
        site.check_queries_on_the_grid("decomposed relative positions need")
        if site.grid is None:
            raise RuleError(f"decomposed relative positions need tokens on a grid, got "
                            f"{site.x.layout_name()}", field="scores",
                            hint=Remedy("patchify an image first, or declare the input's `grid: [H, W]`"))
        h, w = site.grid
        if site.queries != h * w:
            raise RuleError(f"decomposed relative positions need every query on the {h}x{w} grid, but there are "
                            f"{site.queries} queries (class tokens have no place on it)", field="scores",
                            hint=Remedy("patchify without cls_token, or slice the class token off first"))
        if site.key_grid is None:
            site.check_external_keys_on_the_grid("decomposed relative positions need")
        key_h, key_w = site.key_grid or site.grid
        if site.keys != key_h * key_w:
            raise RuleError(f"decomposed relative positions need the keys on the queries' {h}x{w} grid, but "
                            f"there are {site.keys} keys for {site.queries} queries", field="scores",
                            hint=Remedy("use the part with self-attention (global, window or pooled kinds)"))

    def cost(self, p, site: ScoreSite) -> Cost:
        """The two tables; q·R_h and q·R_w as timm's einsums (batched matmuls over the rows and
        over the columns): 2 · heads · queries · (K_h + K_w) · head_dim; two int64 offset indexes."""
        h, w = site.grid
        key_h, key_w = site.key_grid or site.grid
        params = (2 * max(h, key_h) - 1 + 2 * max(w, key_w) - 1) * site.head_dim
        flops = 2 * site.heads * site.queries * (key_h + key_w) * site.head_dim
        return Cost(params, flops, INDEX_BYTES * (h * key_h + w * key_w))


DECOMPOSED = register(DecomposedPart())

from ....decoding import Mixes  # noqa: E402  (beside the registration it serves)
from .base import register_score_decoding  # noqa: E402

register_score_decoding(DECOMPOSED, Mixes("its tables are over the rows and columns of a fixed grid"
                                        ", not positions of a sequence that grows a token at a time"))
