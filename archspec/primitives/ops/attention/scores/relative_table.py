"""relative_table: a learned bias per head for each 2-D offset between two tokens of a grid,
added to the scores (BEiT; timm's beit Attention with `use_rel_pos_bias`).

The table holds (2H - 1) · (2W - 1) rows, one per offset (Δrow, Δcolumn) between two cells of
the site's H x W grid, each a bias per head; a fixed index picks the row of every (query, key)
pair. With `class_tokens: true` (BEiT) the tokens are one class token and the grid, and the
table has three more rows: class -> token, token -> class and class -> class, in that order
(timm's gen_relative_position_index). The part gives an additive bias [1, h, N, N]: the
attention stays one fused SDPA.
"""

from __future__ import annotations

from .....core.declared import Field
from ....base import Cost, Params, RuleError
from ....counting import INDEX_BYTES
from .....core.suggestions import Remedy
from ....registry import register
from .base import ScorePart, ScoreSite

CLASS_ROWS = 3  # class -> token, token -> class, class -> class


class RelativeTableParams(Params):
    class_tokens: bool = Field(True, description="one class token before the grid, with BEiT's three extra rows "
                                                 "(class -> token, token -> class, class -> class); false: the "
                                                 "tokens are the grid alone")


def table_rows(grid: tuple[int, int], class_tokens: bool) -> int:
    """(2H - 1)(2W - 1) offsets, plus BEiT's three class rows."""
    h, w = grid
    return (2 * h - 1) * (2 * w - 1) + (CLASS_ROWS if class_tokens else 0)


class RelativeTablePart(ScorePart):
    """A learned per-head bias for each 2-D offset on the site's grid (plus BEiT's class-token
    rows), indexed by a fixed table and added to the scores: one bias, fused SDPA."""

    name = "relative_table"
    one_grid = "relative_table's position table"
    Params = RelativeTableParams
    explicit = False
    adds_bias = True

    def check(self, p, site: ScoreSite) -> None:
        h, w = site.grid_of_the_queries("a relative position table needs")
        prefix = 1 if p.class_tokens else 0
        if site.queries != h * w + prefix:
            raise RuleError(self._mismatch(p, site), field="scores", hint=Remedy(self._remedy(p, site)))
        site.check_keys_are_the_queries("a relative position table needs")

    def _mismatch(self, p, site: ScoreSite) -> str:
        h, w = site.grid
        want = f"one class token and the {h}x{w} grid ({h * w + 1} tokens)" if p.class_tokens else \
            f"exactly the {h}x{w} grid ({h * w} tokens)"
        return f"relative_table with class_tokens: {str(p.class_tokens).lower()} needs {want}, got {site.queries}"

    def _remedy(self, p, site: ScoreSite) -> str:
        h, w = site.grid
        extra = site.queries - h * w
        if extra == 0:
            return "set `class_tokens: false` (these tokens have no class token)"
        if extra == 1:
            return "set `class_tokens: true` (these tokens begin with a class token)"
        if extra > 1:
            return f"the table has rows for one class token, and there are {extra}: patchify with `cls_token: true`"
        return "use the part where the tokens are one class token and the grid, or the grid alone"

    def cost(self, p, site: ScoreSite) -> Cost:
        """The table; no FLOPs (a lookup); the int64 index [N, N]."""
        return Cost(table_rows(site.grid, p.class_tokens) * site.heads, 0, INDEX_BYTES * site.queries * site.keys)


RELATIVE_TABLE = register(RelativeTablePart())

from ....decoding import Mixes  # noqa: E402  (beside the registration it serves)
from .base import register_score_decoding  # noqa: E402

register_score_decoding(RELATIVE_TABLE, Mixes("its table is over the offsets of a fixed grid"
                                        ", not positions of a sequence that grows a token at a time"))
