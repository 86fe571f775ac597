"""linear: a linear map of the channels of tokens or a feature vector, or of the last axis of any
float tensor (bias optional): ConViT's map of each (query, key) offset [1, N, N, 3] to a score
per head [1, N, N, heads]."""

from __future__ import annotations

from dataclasses import replace

from ...core.declared import Field
from ...core.types import TensorType
from ..base import Cost, Op, Params, PositiveInt, RuleError
from ..counting import linear_flops, linear_params
from ..registry import register
from ..dtypes import READS, FLOATS
from ..decoding import TOKENWISE, register_decoding


class LinearParams(Params):
    dim: PositiveInt = Field(description="output width")
    bias: bool = True


class LinearOp(Op):
    """y = x W^T + b over the channels: [..., C] -> [..., dim]."""

    primitive = "linear"
    Params = LinearParams

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        if x.layout not in ("tokens", "vector", "tensor") or not x.dtype.startswith("float"):
            raise RuleError(f"linear reads tokens, a feature vector or a float tensor, got {x.layout_name()}",
                            hint="to_tokens turns an image into tokens" if x.layout == "image" else None)
        if len(x.shape) < 2:  # [B]: the last axis is the batch, which a linear map must not mix
            raise RuleError(f"linear maps the last axis, and {x.layout_name()} has only its batch axis",
                            hint="keep a feature axis (an einsum's output 'b c', a rearrange 'b -> b 1')")
        if not isinstance(x.shape[-1], int):  # a weight [dim, L] would change with the input
            raise RuleError(f"linear maps the last axis, and here that axis has size {x.shape[-1]}, which changes "
                            "with the input: a linear map's weights need a fixed width",
                            hint="map an axis of fixed size: reduce or rearrange the sequence axis away first")
        return replace(x, shape=tuple(x.shape[:-1]) + (p.dim,))  # [..., C] -> [..., dim]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        rows = x.row_numel() // x.channels  # per row of the batch: the costing counts the rows of a sample
        return Cost(linear_params(x.channels, p.dim, p.bias), linear_flops(rows, x.channels, p.dim))


LINEAR = register(LinearOp())
READS.register(LINEAR, FLOATS)
register_decoding(LINEAR, TOKENWISE)
