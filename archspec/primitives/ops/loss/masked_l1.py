"""masked_l1: SimMIM's reconstruction loss. The L1 distance of prediction and target images
over the masked pixels only: sum(|p - t| * m) / (sum(m) + 1e-5) / channels, where m is the
grid mask [B, h, w] repeated to pixels (each mask cell covers H/h x W/w pixels)."""

from __future__ import annotations

from typing import Literal

from ....core.types import TensorType
from ...base import RuleError
from ...grids import image_origin
from ...registry import register
from .common import LossOp, LossParams
from ...decoding import Mixes, register_decoding


class MaskedL1Params(LossParams):
    kind: Literal["masked_l1"]


class MaskedL1(LossOp):
    """L1 over masked pixels, normalised by the masked pixels and the channels."""

    kind = "masked_l1"
    Params = MaskedL1Params

    def reads(self, p) -> tuple[str, ...]:
        return ("prediction", "target", "mask")

    def check(self, p, inputs: list[TensorType]) -> None:
        prediction, target, mask = inputs
        if prediction.layout != "image" or target.layout != "image":
            raise RuleError(f"masked_l1 compares two images, got {prediction.layout_name()} and "
                            f"{target.layout_name()}", field="from")
        if tuple(prediction.shape) != tuple(target.shape):
            raise RuleError(f"prediction {prediction.describe()} and target {target.describe()} differ in shape",
                            field="from")
        if mask.layout != "mask":
            raise RuleError(f"masked_l1 needs a grid mask [B, h, w] as its third input, got {mask.layout_name()}",
                            field="from")
        (h, w), (H, W) = mask.grid, prediction.shape[2:]
        if H % h or W % w:
            raise RuleError(f"the {h}x{w} mask does not tile the {H}x{W} image", field="from",
                            hint="each mask cell must cover a whole number of pixels", grid=image_origin(prediction))

    def value_range(self, p, slot: int, ctx) -> int | None:
        return 2 if slot == 2 else None


MASKED_L1 = register(MaskedL1())
register_decoding(MASKED_L1, Mixes("a loss sums over the tokens"))
