"""convolutional: CvT's convolutional projection attention (Wu et al., "CvT: Introducing
Convolutions to Vision Transformers", ICCV 2021; Hugging Face's CvtSelfAttention). Before its
linear map, each of q, k and v is a depthwise `kernel_size` x `kernel_size` convolution of the
token grid (no bias, padding kernel_size // 2) and a BatchNorm: the queries at stride 1, the keys
and values at `stride_kv` (fewer keys: 2 in CvT); class tokens skip the convolutions and
join each of q, k and v before the linear maps. Then attention with the scale width^-0.5 (CvT's,
not head_dim^-0.5; `scale` sets another) and the output projection. Parameters: `conv_q`,
`conv_k`, `conv_v` (each `conv` and `norm`), `q`, `k`, `v` and `proj`.

    - {id: attn, attention: {kind: convolutional, heads: 2, stride_kv: 2}}
"""

from __future__ import annotations

from typing import Literal

from ....core.declared import Field
from ....core.suggestions import Remedy
from ....core.types import TensorType, dim_value
from ...base import Cost, PositiveInt, RuleError, sublayer_params
from ...counting import FLOAT_BYTES, attention_flops, linear_flops, linear_params, norm_params
from ...decoding import Mixes, register_decoding
from ...registry import register
from .common import AttentionOp, AttentionParams


class ConvolutionalParams(AttentionParams):
    kind: Literal["convolutional"]
    kernel_size: PositiveInt = Field(3, description="the depthwise convolutions' kernel (odd; padding "
                                                    "kernel_size // 2)")
    stride_kv: PositiveInt = Field(2, description="the keys' and values' convolution stride (CvT: 2)")
    scale: float | None = Field(None, gt=0, allow_inf_nan=False,
                                description="the scores' scale; none: width^-0.5, CvT's (not head_dim^-0.5)")
    bn_eps: float = Field(1e-5, gt=0, allow_inf_nan=False, description="the BatchNorms' epsilon")


def strided(n: int, kernel: int, stride: int) -> int:
    """An axis of n cells after a kernel x kernel convolution with padding kernel // 2."""
    return (n + 2 * (kernel // 2) - kernel) // stride + 1


class ConvolutionalAttentionOp(AttentionOp):
    """q, k and v each a depthwise conv + BatchNorm of the token grid before its linear map (CvT)."""

    kind = "convolutional"
    Params = ConvolutionalParams

    def grid(self, inputs: list[TensorType]) -> tuple[int, int]:
        x = inputs[0]
        if x.layout != "tokens" or x.grid is None:
            raise RuleError(f"convolutional attention needs a token grid, got {x.layout_name()}", field="kind",
                            hint="tokens are on a grid when they come from patchify or to_tokens")
        return x.grid

    def check(self, p, inputs: list[TensorType]) -> None:
        if p.kernel_size % 2 == 0:
            raise RuleError(f"kernel_size {p.kernel_size} is even: the convolutions pad kernel_size // 2 on each "
                            "side, which keeps the grid's centre only for an odd kernel", field="kernel_size",
                            hint=Remedy("use an odd kernel_size (CvT: 3)"))
        self.grid(inputs)

    def places(self, p, inputs: list[TensorType], stride: int) -> int:
        """Grid tokens after a convolution of `stride`, plus the class tokens."""
        h, w = self.grid(inputs)
        return strided(h, p.kernel_size, stride) * strided(w, p.kernel_size, stride) + inputs[0].prefix

    def keys(self, p, inputs: list[TensorType]) -> int:
        return self.places(p, inputs, p.stride_kv)

    def score_bytes(self, p, inputs: list[TensorType]) -> int:
        return FLOAT_BYTES * p.heads * dim_value(inputs[0].length) * self.keys(p, inputs)

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        """Three depthwise convs and BatchNorms, q over every token, k and v over the strided keys,
        attention between them, the projection over every token."""
        x = inputs[0]
        width, tokens, keys, prefix = x.channels, dim_value(x.length), self.keys(p, inputs), x.prefix
        k2 = p.kernel_size**2
        params = 3 * (k2 * width + norm_params(width)) + 3 * linear_params(width, width, p.qkv_bias)
        params += linear_params(width, width, p.proj_bias) + sublayer_params(p, width)
        flops = 2 * k2 * width * ((tokens - prefix) + 2 * (keys - prefix))  # the depthwise convs
        flops += linear_flops(tokens, width, width) + 2 * linear_flops(keys, width, width)
        flops += attention_flops(tokens, keys, width) + linear_flops(tokens, width, width)
        return Cost(params, flops, 0, self.score_bytes(p, inputs))


CONVOLUTIONAL = register(ConvolutionalAttentionOp())
register_decoding(CONVOLUTIONAL, Mixes("convolutional attention's keys are convolutions over the grid, later tokens "
                                       "included (only causal, sliding and alibi attention are cached)"))
