"""param: a learned tensor (reads nothing). Its first dimension is 1, so it broadcasts over the
batch in add and multiply: `shape: [197, 768]` is a tokens-like [1, 197, 768] (a position
embedding), `shape: [768]` a vector-like [1, 768] (a per-channel scale). With `learned: false`
it is a buffer instead: in the state dict (a checkpoint loads it), never trained, not counted
among the parameters (BART's final_logits_bias, a fixed position table). With `frozen: true` it
is a parameter that never trains (requires_grad false): counted among the parameters, not among
the trainable ones (Hugging Face's PatchTST and Whisper hold their sinusoid tables so)."""

from __future__ import annotations

from typing import Literal

from ...core.declared import Field
from ...core.types import TensorType
from ...core.suggestions import Remedy
from ..base import Cost, MAX_SIZE, Op, Params, PositiveInt, RuleError
from ..registry import register
from ..dtypes import READS, ANY
from ..decoding import NO_TOKENS, register_decoding

LAYOUT_OF_RANK = {1: "vector", 2: "tokens", 3: "image"}


class ParamParams(Params):
    shape: list[PositiveInt] = Field(min_length=1, max_length=3,
                                     description="the tensor's shape without the batch: [C], [N, C] or [C, H, W]")
    init: Literal["zeros", "ones", "normal", "trunc_normal", "value"] = Field(
        "trunc_normal", description="zeros, ones, normal, trunc_normal, or value: every value `value` (a LayerScale "
                                    "starting at 1e-4, ResMLP's)")
    std: float = Field(0.02, gt=0, description="standard deviation of the normal inits")
    value: float | None = Field(None, allow_inf_nan=False, description="init: value: the number every value "
                                                                        "starts at")
    learned: bool = Field(True, description="false: a buffer, kept in the state dict and loaded from checkpoints, "
                                            "never trained, not counted among the parameters")
    frozen: bool = Field(False, description="a parameter that never trains (requires_grad false): counted among "
                                            "the parameters, not the trainable ones (Hugging Face's frozen tables)")


class Param(Op):
    """A learned tensor of the given shape (batch dimension 1, so it broadcasts)."""

    primitive = "param"
    Params = ParamParams

    def reads(self, p) -> tuple[str, ...]:
        return ()

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        count = 1
        for size in p.shape:
            count *= size
        if count > MAX_SIZE * 64:
            raise RuleError(f"a parameter of {count:,} values is beyond archspec's limit", field="shape")
        if (p.init == "value") != (p.value is not None):
            raise RuleError("init: value starts every value at `value`: give both, or neither", field="value",
                            hint=Remedy("e.g. `init: value, value: 1.0e-4`"))
        if p.frozen and not p.learned:
            raise RuleError("`frozen` keeps a parameter from training, but `learned: false` makes this a buffer, "
                            "which never trains and is not counted among the parameters", field="frozen",
                            hint=Remedy("give one: `frozen: true` (counted, never trained) or `learned: false` "
                                        "(not counted, never trained)"))
        return TensorType(LAYOUT_OF_RANK[len(p.shape)], (1, *p.shape))  # [1, ...]

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(out.max_numel() if p.learned else 0, 0)


PARAM = register(Param())
READS.register(PARAM, ANY)
register_decoding(PARAM, NO_TOKENS)
