"""pixel_shuffle: [B, C*r*r, H, W] -> [B, C, H*r, W*r] (torch.nn.PixelShuffle): channels back
to pixels, e.g. SimMIM's decoder output to an image."""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import TensorType, image
from ..base import Cost, Op, Params, PositiveInt, RuleError, not_image_hint
from ..registry import register
from ..dtypes import READS, ANY
from ..decoding import Mixes, register_decoding


class PixelShuffleParams(Params):
    factor: PositiveInt = Field(description="upscale factor r")


class PixelShuffle(Op):
    """[B, C*r*r, H, W] -> [B, C, H*r, W*r]."""

    primitive = "pixel_shuffle"
    Params = PixelShuffleParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout != "image":
            raise RuleError(f"pixel_shuffle reads an image, got {x.layout_name()}",
                            hint=not_image_hint(x) + ("; pixel_shuffle moves channels into space (depth to space): "
                                                      "Idefics3's and SmolVLM's 'pixel shuffle' of a token grid "
                                                      "moves space into channels, a rearrange 'b (h sh w sw) c -> "
                                                      "b (h w) (sh sw c)'" if x.layout == "tokens" else ""))
        r2 = p.factor * p.factor
        if x.channels % r2:
            raise RuleError(f"{x.channels} channels are not a multiple of factor^2 = {r2}", field="factor")
        return image(x.channels // r2, x.shape[2] * p.factor, x.shape[3] * p.factor)  # [B, C, H*r, W*r]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


PIXEL_SHUFFLE = register(PixelShuffle())
READS.register(PIXEL_SHUFFLE, ANY)
register_decoding(PIXEL_SHUFFLE, Mixes("pixel_shuffle moves values between positions of a grid"))
