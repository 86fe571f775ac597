"""offset_table: a learned bias per head for each absolute 2-D offset (|Δrow|, |Δcolumn|) between
two cells of a grid, added to the scores (LeViT, TinyViT: timm's `attention_biases` [heads, H·W]
and `attention_bias_idxs`).

Unlike `relative_table`, whose offsets are signed ((2H - 1)(2W - 1) rows), the offsets here are
absolute, so the table has H·W columns: offset (a, b) is column a·W + b (the order in which
timm's loop over the grid first meets each offset). The grid is the site's: the token grid for
global attention, the window for window kinds. The part gives an additive bias [1, h, N, N]:
the attention stays one fused SDPA.
"""

from __future__ import annotations

from ....base import Cost, Params, RuleError
from ....counting import INDEX_BYTES
from ....decoding import Mixes
from .....core.suggestions import Remedy
from ....registry import register
from .base import ScorePart, ScoreSite, register_score_decoding


class OffsetTableParams(Params):
    pass


class OffsetTablePart(ScorePart):
    """A learned per-head bias for each absolute 2-D offset (|Δrow|, |Δcolumn|) on the site's grid
    (LeViT / TinyViT's attention_biases), added to the scores: one bias, fused SDPA."""

    name = "offset_table"
    one_grid = "offset_table's table"
    Params = OffsetTableParams
    explicit = False
    adds_bias = True

    def check(self, p, site: ScoreSite) -> None:
        h, w = site.grid_of_the_queries("an offset table needs")
        if site.queries != h * w:
            raise RuleError(f"an offset table needs every query on the {h}x{w} grid, but there are {site.queries} "
                            "queries (class tokens have no place on it)", field="scores",
                            hint=Remedy("patchify without cls_token, or slice the class token off first"))
        site.check_keys_are_the_queries("an offset table needs")

    def cost(self, p, site: ScoreSite) -> Cost:
        """The table [heads, H·W]; no FLOPs (a lookup); the int64 index [N, N]."""
        h, w = site.grid
        return Cost(site.heads * h * w, 0, INDEX_BYTES * site.queries * site.keys)


OFFSET_TABLE = register(OffsetTablePart())
register_score_decoding(OFFSET_TABLE, Mixes("its table is over the offsets of a fixed grid, not positions of a "
                                            "sequence that grows a token at a time"))
