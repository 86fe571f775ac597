"""squeeze_excite: each channel scaled by a gate computed from the whole image's mean (timm's
SEModule and EfficientNet's SqueezeExcite; Squeeze-and-Excitation, Hu et al. 2018).

    squeeze_excite: {hidden: 16, act: relu, gate: sigmoid}

x * gate(fc2(act(fc1(mean over H, W of x)))), where fc1 and fc2 are 1x1 convs (C -> hidden ->
C, with biases unless `bias: false`): the state dict is timm's SEModule's, `fc1.weight`
[hidden, C, 1, 1], `fc2.weight` [C, hidden, 1, 1]. It reads an image, or a token grid without
class tokens read as one, and gives the layout it read.
"""

from __future__ import annotations

from ...core.declared import Field
from ...core.types import TensorType
from ..activations import Function, described, learned_params
from ..base import Cost, Op, Params, PositiveInt
from ..grids import as_image
from ..registry import register
from ..dtypes import READS, FLOATS
from ..decoding import Mixes, register_decoding


class SqueezeExciteParams(Params):
    hidden: PositiveInt = Field(description="the squeezed width: fc1's output channels (timm's rd_channels; "
                                            "make_divisible(C * rd_ratio, 8) in timm's SEModule)")
    act: Function = Field("relu", description=f"between fc1 and fc2: one of {described()}")
    gate: Function = Field("sigmoid", description="what turns fc2's output into each channel's scale "
                                                  "(hardsigmoid: MobileNetV3's)")
    bias: bool = Field(True, description="fc1 and fc2 add biases")


class SqueezeExciteOp(Op):
    """x * gate(fc2(act(fc1(mean_hw x)))): an image (or a token grid) in, the same layout out."""

    primitive = "squeeze_excite"
    Params = SqueezeExciteParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        as_image(x, "squeeze_excite")  # an image, or a grid of tokens without class tokens
        return x

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        channels = as_image(inputs[0], "squeeze_excite")[0]
        weights = 2 * channels * p.hidden  # fc1 and fc2, each applied once to the pooled [C, 1, 1]
        learned = learned_params(p.act) + learned_params(p.gate)  # star_relu's scale and bias
        return Cost(weights + ((p.hidden + channels) if p.bias else 0) + learned, 2 * weights)


SQUEEZE_EXCITE = register(SqueezeExciteOp())
READS.register(SQUEEZE_EXCITE, FLOATS)
register_decoding(SQUEEZE_EXCITE, Mixes("squeeze_excite pools over the whole grid"))
