"""contrastive: CLIP's logits: normalise image and text features, scaled cosine similarity
-> [B, B]."""

from __future__ import annotations

import math
from typing import Literal

from ....core.declared import Field
from ....core.types import TensorType, matrix
from ...base import Cost, Op, Params, RuleError
from ...counting import linear_flops
from ...registry import register
from ...dtypes import READS, FLOATS
from ...decoding import Mixes, register_decoding


class ContrastiveParams(Params):
    kind: Literal["contrastive"]
    logit_scale: float = Field(math.log(1 / 0.07), description="initial log of the logit scale")


class ContrastiveHead(Op):
    """CLIP: normalise image and text features, scaled cosine similarity -> [B, B] logits."""

    primitive = "head"
    kind = "contrastive"
    Params = ContrastiveParams

    def reads(self, p) -> tuple[str, ...]:
        return ("image", "text")

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        image, text = inputs
        for name, t in (("image", image), ("text", text)):
            if t.layout != "vector":
                raise RuleError(f"contrastive logits read two feature vectors; the {name} input is "
                                f"{t.layout_name()}", field="from", hint="end each tower with a features head")
        if image.channels != text.channels:
            raise RuleError(f"image features are {image.channels} wide but text features {text.channels}",
                            field="from", hint="project both towers to the same width (features head `project`)")
        return matrix()  # [B, D], [B, D] -> [B, B]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        return Cost(1, linear_flops(1, inputs[0].channels, 1))  # logit scale; one image-text product per sample


CONTRASTIVE = register(ContrastiveHead())
READS.register(CONTRASTIVE, FLOATS)
register_decoding(CONTRASTIVE, Mixes("a contrastive head pools each tower"))
