"""The element-wise family: ops that differ only by what they compute from each value, declared
once from one table (JAX's `standard_naryop`, inductor's `register_pointwise`), each row one op:
its name in a spec, its parameters, its doc, the inputs it reads and its shape rule.

    add        x + y (+ z ...): two embeddings, tokens plus a learned parameter, a parallel
               block's input and its two branches
    subtract   x - y: a difference of two branches, x minus a mean
    multiply   x * y: a gate, or a learned per-channel scale
    divide     x / y: a norm by hand, x / sqrt(mean(x**2) + eps)
    power      x ** exponent: squares for a mean square, -0.5 for a reciprocal square root (a
               negative value to a fractional power is NaN, as in torch)
    scale      x * factor: attention's 1/sqrt(d) folded in or undone, as T5's `q * d**-0.5`; the
               two halves of a logit soft-cap, c * tanh(x / c)
    shift      x + value: Gemma's RMSNorm weight `1 + w`, an offset before a power
    clamp      x held within [min, max] (torch.clamp): F.normalize's max(|x|, eps) under a
               divide (XCiT's L2-normalised q and k), a cap on a learned scale (CLIP's logit
               scale at most ln 100); `clamp: {min: 1.0e-12}`, `clamp: {min: -1, max: 1}`
    compare    x compared with a constant, as 0/1: MAE's mask of removed tokens is
               `ids_restore >= len_keep` as float32
    activation an element-wise non-linearity (archspec/primitives/activations.py names them)
    dropout    zero values with probability `rate` in training (identity in eval)

Every member counts no FLOPs (FlopCounterMode counts none for element-wise ops) and has no
parameters of its own but an activation's learned scalars (star_relu, xielu: its row's `learned`):
the family says so once, in its cost; and each decodes token by token
(DECODE: TOKENWISE, archspec/primitives/decoding.py). Their torch side is one table too
(compiler/modules/elementwise.py). An element-wise op with rules of its own (softmax's axis) keeps
its own file.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Callable, Literal, Optional

from ...core.declared import Field
from ...core.types import TensorType, ids, sequence_shaped, tensor
from ..activations import Function, described, learned_params
from ..base import Cost, NoParams, Op, Params, Rate, RuleError, require_float
from ..broadcast import broadcast
from ..decoding import TOKENWISE, register_decoding
from ..registry import register
from ..dtypes import ANY, FLOATS, READS, Reads
from ..index_ranges import VALUES

# -- parameter models (each row's) -----------------------------------------------------------------


class PowerParams(Params):
    exponent: float = Field(allow_inf_nan=False, description="the constant power every value is raised to")


class ScaleParams(Params):
    factor: float = Field(allow_inf_nan=False, description="the constant every value is multiplied by")


class ShiftParams(Params):
    value: float = Field(allow_inf_nan=False, description="the constant added to every value")


class ClampParams(Params):
    min: Optional[float] = Field(None, allow_inf_nan=False, description="the least value (none: no lower bound)")
    max: Optional[float] = Field(None, allow_inf_nan=False, description="the greatest value (none: no upper bound)")


class CompareParams(Params):
    op: Literal["lt", "le", "gt", "ge", "eq", "ne"] = Field(description="x < value, <=, >, >=, == or !=")
    value: int | float = Field(description="the constant x is compared with")
    dtype: Literal["float32", "int64"] = Field("float32", description="the 0/1 result's dtype (int64 [B, N]: a "
                                                                      "sequence mask, as mask_token reads; float32: "
                                                                      "the model's floats, bf16 in a bf16 build)")


class CastParams(Params):
    dtype: Literal["float32", "int64"] = Field(description="float32: integers as floats (of the model's floating "
                                                           "dtype once it is cast); int64: floats truncated toward "
                                                           "zero, as torch's .long()")


class ActivationParams(Params):
    fn: Function = Field(description=f"one of {described()}")


class DropoutParams(Params):
    rate: Rate = Field(description="probability of zeroing a value in training")


class DropPathParams(Params):
    rate: Rate = Field(description="probability of zeroing a sample's whole value in training")


# -- shape rules (p, inputs) -> output type ----------------------------------------------------------

ShapeRule = Callable[[Params, list[TensorType]], TensorType]


def broadcasts(what: str) -> ShapeRule:
    """x op y (op z ...): the inputs' shapes broadcast, left to right."""
    return lambda p, inputs: functools.reduce(lambda total, t: broadcast(total, t, what), inputs)


def quotient(p, inputs: list[TensorType]) -> TensorType:
    """divide: the inputs broadcast and hold floats (torch divides integers into floats, which is
    not their type)."""
    out = broadcast(inputs[0], inputs[1], "divide")
    if out.dtype != "float32":
        raise RuleError(f"divide reads floating-point values, got {out.dtype}", field="from",
                        hint="divide floats; integer ids or masks have no exact quotient")
    return out


def of_floats(what: str, field: str | None = "from") -> ShapeRule:
    """fn(x): x holds floats; the output has its type."""
    def rule(p, inputs: list[TensorType]) -> TensorType:
        (x,) = inputs
        require_float(x, what, field=field)
        return x

    return rule


def clamped(p: ClampParams, inputs: list[TensorType]) -> TensorType:
    if p.min is None and p.max is None:
        raise RuleError("clamp needs `min`, `max` or both", field="min", hint="e.g. clamp: {min: 1.0e-12}")
    if p.min is not None and p.max is not None and p.min > p.max:
        raise RuleError(f"clamp's min {p.min} is above its max {p.max}", field="min")
    return of_floats("clamp")(p, inputs)


def selected(p, inputs: list[TensorType]) -> TensorType:
    """where: a 0/1 int64 condition, x where it is 1 and y where it is 0; the three broadcast,
    the result x's and y's dtype (torch.where; Hugging Face's masked_fill with finfo.min)."""
    condition, x, y = inputs
    if condition.dtype != "int64":
        raise RuleError(f"where's condition is 0/1 int64, got {condition.layout_name()} of {condition.dtype}",
                        field="from", hint="`compare: {op: ne, value: 0, dtype: int64}` of it gives one")
    out = broadcast(x, y, "where")
    return broadcast(out, replace(condition, dtype=out.dtype), "where")  # the condition's shape joins in


def cast_notice(p: CastParams, inputs: list[TensorType]) -> tuple[str, str] | None:
    """A cast to the dtype its values have already does nothing (a block reused on either dtype may
    say it): a warning and its hint, not an error."""
    (x,) = inputs
    if p.dtype != x.dtype:
        return None
    return f"cast to {p.dtype} of values that are {x.dtype} already does nothing", "drop the cast"


def cast(p: CastParams, inputs: list[TensorType]) -> TensorType:
    """x's values as `dtype`: int64 [B, N] is ids; token ids as floats are a tensor [B, N]; any
    other keeps its layout."""
    (x,) = inputs
    if p.dtype == x.dtype:
        return x  # nothing to do: cast_notice says so
    if sequence_shaped(x.shape, p.dtype):
        return ids(x.shape[1])  # [B, N] int64
    if x.layout == "ids":
        return tensor(x.shape, p.dtype)  # [B, N] float32
    return replace(x, dtype=p.dtype)  # same shape and layout


def compared(p: CompareParams, inputs: list[TensorType]) -> TensorType:
    """0/1 of `dtype` in x's shape; int64 [B, N] is ids (a sequence mask)."""
    (x,) = inputs
    if sequence_shaped(x.shape, p.dtype):
        return ids(x.shape[1])  # [B, N] int64
    return tensor(x.shape, p.dtype)  # same shape, 0/1


# -- the family ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElementwiseRow:
    """One row of the family: the op `name`, its `params` model, its `doc`, the inputs it `reads`
    (with `variadic`, the last any number of times), its `shape` rule and the dtypes it reads
    (`dtypes`, dtypes.py: FLOATS, or ANY where int64 indices are fine)."""

    name: str
    params: type[Params]
    doc: str
    reads: tuple[str, ...]
    shape: ShapeRule
    dtypes: Reads
    variadic: bool = False
    notice: Callable[[Params, list[TensorType]], tuple[str, str] | None] | None = None  # a warning and its hint
    learned: Callable[[Params], int] | None = None  # the learned parameters it holds (star_relu's scale and bias)


BINARY = ("x", "y")
UNARY = ("x",)

ELEMENTWISE = (  # name, params, doc (its first line: what it computes), inputs, shape rule
    ElementwiseRow("add", NoParams, "x + y (+ more), element-wise; shapes must broadcast.",
                   BINARY, broadcasts("add"), ANY, variadic=True),
    ElementwiseRow("subtract", NoParams, "x - y, element-wise; shapes must broadcast.",
                   BINARY, broadcasts("subtract"), ANY),
    ElementwiseRow("multiply", NoParams, "x * y, element-wise; shapes must broadcast.",
                   BINARY, broadcasts("multiply"), ANY),
    ElementwiseRow("divide", NoParams, "x / y, element-wise on floating-point values; shapes must broadcast.\n\n"
                   "Integers are refused: torch divides them into floats, which is not their type.",
                   BINARY, quotient, FLOATS),
    ElementwiseRow("maximum", NoParams, "max(x, y), element-wise (torch.maximum); shapes must broadcast.",
                   BINARY, broadcasts("maximum"), ANY),
    ElementwiseRow("minimum", NoParams, "min(x, y), element-wise (torch.minimum): two additive masks joined "
                   "without overflow (TimesFM's causal and padding masks); shapes must broadcast.",
                   BINARY, broadcasts("minimum"), ANY),
    ElementwiseRow("power", PowerParams, "x ** exponent, element-wise; the output has the input's type.",
                   UNARY, of_floats("power"), FLOATS),
    ElementwiseRow("scale", ScaleParams, "x * factor, element-wise; the output has the input's type.",
                   UNARY, of_floats("scale"), FLOATS),
    ElementwiseRow("shift", ShiftParams, "x + value, element-wise; the output has the input's type.",
                   UNARY, of_floats("shift"), FLOATS),
    ElementwiseRow("clamp", ClampParams, "min(max(x, min), max), element-wise; the output has the input's type.",
                   UNARY, clamped, FLOATS),
    ElementwiseRow("compare", CompareParams, "(x <op> value) as 0/1 of `dtype`, the shape of x (int64 [B, N]: ids, "
                   "a sequence mask).\n\nAnything else is a tensor of x's shape.",
                   UNARY, compared, ANY),
    ElementwiseRow("where", NoParams, "x where the condition is 1, y where it is 0 (torch.where): a 0/1 int64 "
                   "condition (a `compare` with dtype int64), x and y of one dtype; the shapes broadcast "
                   "(Hugging Face's masked_fill: `where: [mask, x, lowest]` with a `constant: {fill: lowest}`).",
                   ("condition", "x", "y"), selected, ANY),
    ElementwiseRow("cast", CastParams, "x's values as `dtype` (torch's .to): integer indices or coordinates as "
                   "floats, or floats truncated to int64.\n\nint64 [B, N] is ids; any other keeps its layout.",
                   UNARY, cast, ANY, notice=cast_notice),
    ElementwiseRow("activation", ActivationParams, "fn(x), element-wise.",
                   UNARY, of_floats("an activation", field=None), FLOATS, learned=lambda p: learned_params(p.fn)),
    ElementwiseRow("dropout", DropoutParams, "Dropout (identity in eval).",
                   UNARY, of_floats("dropout", field=None), FLOATS),
    ElementwiseRow("drop_path", DropPathParams, "Stochastic depth (timm's DropPath): in training each sample's x "
                   "is zeroed with probability `rate`, the others scaled by 1 / (1 - rate); identity in eval.\n\n"
                   "For a residual branch written out of ops (CAFormer's, FocalNet's): the sub-layers take "
                   "`drop_path` as an option. A sample is a row of the first axis.",
                   UNARY, of_floats("drop_path", field=None), FLOATS),
)


class ElementwiseOp(Op):
    """An op of the element-wise family: everything but its cost is its row's."""

    def __init__(self, row: ElementwiseRow):
        self.row, self.primitive, self.Params, self.variadic = row, row.name, row.params, row.variadic

    @property
    def doc(self) -> str:
        return self.row.doc

    def reads(self, p) -> tuple[str, ...]:
        return self.row.reads

    def cost(self, p, inputs, out, ctx) -> Cost:
        """The family's trait: no FLOPs counted, and no parameters but an activation's learned ones."""
        return Cost(self.row.learned(p) if self.row.learned else 0, 0)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        out = self.row.shape(p, inputs)
        notice = self.row.notice(p, inputs) if self.row.notice else None
        if notice:
            ctx.warn(notice[0], field="dtype", hint=notice[1])
        return out


ELEMENTWISE_OPS: dict[str, ElementwiseOp] = {row.name: register(ElementwiseOp(row)) for row in ELEMENTWISE}
for _op in ELEMENTWISE_OPS.values():  # each output token reads the same token of its inputs; no head's output
    register_decoding(_op, TOKENWISE)
    READS.register(_op, _op.row.dtypes)
VALUES.register(ELEMENTWISE_OPS["compare"], lambda p, inputs, bounds: 2 if p.dtype == "int64" else None)  # 0/1
