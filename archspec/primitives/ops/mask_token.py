"""mask_token: the tokens at masked positions replaced by a learned mask token (SimMIM, BEiT).
The mask is a grid mask [B, H, W] on the tokens' grid, or token ids [B, N] (0/1) over the
tokens; 1 marks a masked position: x * (1 - m) + token * m."""

from __future__ import annotations

from ...core.types import TensorType
from ..base import Cost, Op, Params, RuleError
from ..grids import grid_origin
from ..registry import register
from ..dtypes import READS, FLOAT_FIRST
from ..decoding import TOKENWISE, register_decoding


class MaskTokenParams(Params):
    pass


class MaskTokenOp(Op):
    """x * (1 - mask) + mask_token * mask, per token."""

    primitive = "mask_token"
    Params = MaskTokenParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "mask")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x, mask = inputs
        if x.layout != "tokens":
            raise RuleError(f"mask_token reads tokens, got {x.layout_name()}",
                            hint="patchify the image first" if x.layout == "image" else None)
        if mask.layout == "mask":
            if x.grid != mask.grid or x.prefix:
                raise RuleError(f"the {mask.grid[0]}x{mask.grid[1]} mask does not lie on these tokens "
                                f"({x.describe()})", field="from",
                                hint="a grid mask has one value per grid token; give it the tokens' grid size",
                                grid=grid_origin(x) or grid_origin(mask))
        elif mask.layout == "ids":
            if mask.length != x.length:
                raise RuleError(f"a mask of {mask.length} values for {x.length} tokens", field="from")
        else:
            raise RuleError(f"the mask must be a grid mask [B, H, W] or a sequence mask [B, N] (int64), got "
                            f"{mask.layout_name()}", field="from")
        return x  # same shape

    def cost(self, p, inputs, out: TensorType, ctx) -> Cost:
        return Cost(out.channels, 0)

    def value_range(self, p, slot: int, ctx) -> int | None:
        return 2 if slot == 1 else None  # the mask is 0 or 1


MASK_TOKEN = register(MaskTokenOp())
READS.register(MASK_TOKEN, FLOAT_FIRST)
register_decoding(MASK_TOKEN, TOKENWISE)
