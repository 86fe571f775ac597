"""rotary_grid: 2-D axial rotary positions over a token grid (RoPE-ViT, EVA-02; timm's
`RotaryEmbeddingCat` applied by `EvaAttention` / `AttentionRope` with `apply_rot_embed_cat`).

The first `dims` dims of each head's queries and keys rotate; half of them by the token's row on
the H x W grid and half by its column (`indexing: ij` puts the row first, `xy` the column first,
as timm's `rope_grid_indexing`), each axis with the frequencies theta^(-i / (dims / 4)),
i = 0 .. dims/4 - 1 (timm's `freq_bands(dims // 4, temperature, step=1)`), or with
`frequencies: alternating` those of one 1-D rotary over dims, theta^(-2j / dims), the even j to
the first axis and the odd to the second (Hugging Face's Pixtral). The pairs that turn
together are (2i, 2i + 1) with `interleaved: true` (timm's default) or (i, i + dims/2) with
`interleaved: false` (timm's `rope_rotate_half`). `ref_grid` rescales the positions to a
reference grid (timm's `ref_feat_shape`, EVA's way to fine-tune at another size);
`positions: centres` puts each patch at its centre on [-1, 1], times 2 pi (DINOv3). The prefix
(class and register) tokens are not rotated, unless `prefix_angles` names a tensor of their
angles (MLCD's learned class_pos_emb), laid out as a cell's. The part turns queries and keys
before the scores, so the attention stays one fused SDPA.
"""

from __future__ import annotations

from typing import Literal

from .....core.declared import Field
from ....base import Cost, Params, PositiveInt, RuleError
from ....counting import FLOAT_BYTES
from .....core.suggestions import Remedy
from ....registry import register
from .base import GRID_HINT, ScorePart, ScoreSite


class RotaryGridParams(Params):
    theta: float = Field(10000.0, gt=0, allow_inf_nan=False,
                         description="frequency base (timm's rope_temperature: 10000; RoPE-ViT: 100)")
    dims: PositiveInt | None = Field(None, description="dims of each head that rotate, a multiple of 4 (half by "
                                                       "the row, half by the column); default: all")
    interleaved: bool = Field(True, description="rotate the pairs (2i, 2i + 1) (timm's default); false: (i, i + "
                                                "dims/2), rotate-half (timm's rope_rotate_half)")
    indexing: Literal["ij", "xy"] = Field("ij", description="ij: the row's angles first, then the column's (the "
                                                            "first half of the pairs carry the row); xy: the column "
                                                            "first (RoPE-ViT)")
    frequencies: Literal["per_axis", "alternating"] = Field(
        "per_axis", description="per_axis: each axis theta^(-i / (dims/4)) (timm); alternating: the frequencies of "
                                "one 1-D rotary over dims, theta^(-2j / dims), the even ones to the first axis and "
                                "the odd ones to the second (Pixtral's: the columns a step finer than the rows)")
    positions: Literal["cells", "centres"] = Field(
        "cells", description="cells: each token's row and column index (timm; ref_grid may rescale them); centres: "
                             "its patch's centre on [-1, 1], times 2 pi ((i + 0.5) / n * 2 - 1: DINOv3, whose theta "
                             "is its rope_theta, 100)")
    ref_grid: list[PositiveInt] | None = Field(None, min_length=2, max_length=2,
                                               description="positions rescaled to this reference grid [H, W] "
                                                           "(timm's ref_feat_shape); none: the cell indices")
    prefix_angles: str | None = Field(None, description="the name of a tensor [1, prefix, dims/2] in the node's "
                                                        "`from:` (after the token stream and any score bias): the "
                                                        "angles that turn the prefix (class) tokens, laid out as "
                                                        "a cell's (MLCD's learned class_pos_emb, one `param` every "
                                                        "layer reads); none: the prefix tokens stay as they are")

    @property
    def tensors(self) -> tuple[str, ...]:
        """The inputs it reads by name (the node's `from:` lists them): prefix_angles'."""
        return (self.prefix_angles,) if self.prefix_angles is not None else ()


def rotated_dims(p, site: ScoreSite) -> int:
    return p.dims or site.head_dim


class RotaryGridPart(ScorePart):
    """Queries and keys rotated by their cell on the grid: half the rotated dims by the row,
    half by the column; class tokens left as they are. Fused SDPA."""

    name = "rotary_grid"
    Params = RotaryGridParams
    explicit = False
    one_grid = "rotary_grid's angles, one per cell of the grid"  # the Pixtral trial's --size error named nothing

    def check(self, p, site: ScoreSite) -> None:
        if not site.rotates:
            raise RuleError("rotary_grid turns queries and keys before the scores, and this kind of attention "
                            "does not take parts that do", field="scores",
                            hint=Remedy("use it on global attention (or another sequence kind)"))
        if site.rope_theta is not None:
            raise RuleError("rotary_grid gives the tokens 2-D rotary positions, and rope_theta would rotate them "
                            "again by their 1-D index", field="scores",
                            hint=Remedy("drop rope_theta (and rope_dims, rope_flat); rotary_grid has its own "
                                        "`theta` and `dims`"))
        self._check_grid(site)
        self._check_dims(p, site)
        if p.prefix_angles is not None:
            self._check_prefix_angles(p, site)
        if p.positions == "centres" and p.ref_grid is not None:
            raise RuleError("ref_grid rescales cell indices, and positions: centres are already on [-1, 1] whatever "
                            "the grid", field="ref_grid", hint=Remedy("drop ref_grid, or use positions: cells"))

    def _check_prefix_angles(self, p, site: ScoreSite) -> None:
        """The prefix angles: the node's one named tensor, float [1, prefix, dims/2], with a prefix to turn."""
        if len(site.tensors) != 1:
            raise RuleError(f"rotary_grid's prefix_angles reads one tensor, and this attention gives its score "
                            f"parts {len(site.tensors)}", field="prefix_angles",
                            hint=Remedy("name it in the node's `from:` after the token stream (and the score "
                                        "bias); one part of a node reads tensors"))
        angles, prefix, half = site.tensors[0], site.x.prefix, rotated_dims(p, site) // 2
        if not prefix:
            raise RuleError("prefix_angles turn the prefix (class) tokens, and these tokens have none",
                            field="prefix_angles", hint=Remedy("drop prefix_angles"))
        want = f"[1, {prefix}, {half}]"
        if angles.dtype != "float32" or tuple(angles.shape) != (1, prefix, half):
            raise RuleError(f"prefix_angles '{p.prefix_angles}' must be float {want} (a prefix token's {half} "
                            f"angles, dims/2), got {angles.describe()}", field="prefix_angles",
                            hint=Remedy(f"a `param: {{shape: [{prefix}, {half}]}}`"))

    def _check_grid(self, site: ScoreSite) -> None:
        site.grid_of_the_queries("2-D rotary positions need", f"{GRID_HINT}; 1-D positions are `rope_theta`")
        site.check_keys_are_the_queries("2-D rotary positions need", kinds="global")

    def _check_dims(self, p, site: ScoreSite) -> None:
        dims = rotated_dims(p, site)
        if dims > site.head_dim or dims % 4:
            what = f"dims {dims}" if p.dims else f"the head width {dims} (all of it rotates by default)"
            raise RuleError(f"rotary_grid needs {what} to be a multiple of 4 and at most the head width "
                            f"{site.head_dim}: a pair of dims per frequency, half of them for the rows and half "
                            "for the columns", field="scores",
                            hint=Remedy(f"set `dims` to a multiple of 4 up to {site.head_dim - site.head_dim % 4}")
                            if site.head_dim >= 4 else "fewer heads: each head's width must be at least 4")

    def cost(self, p, site: ScoreSite) -> Cost:
        """No parameters; no FLOPs (elementwise); the sin and cos tables [H*W, dims], float32."""
        h, w = site.grid
        return Cost(0, 0, FLOAT_BYTES * 2 * h * w * rotated_dims(p, site))


ROTARY_GRID = register(RotaryGridPart())

from ....decoding import Mixes  # noqa: E402  (beside the registration it serves)
from .base import register_score_decoding  # noqa: E402

register_score_decoding(ROTARY_GRID, Mixes("it turns queries and keys by their cell on a fixed grid"
                                        ", not by positions of a sequence that grows a token at a time"))
