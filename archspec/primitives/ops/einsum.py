"""einsum: a sum of products over named axes, in einops' notation (one to three inputs):

    - {id: scores, from: [q, k], einsum: {eq: "b h i d, b h j d -> b h i j"}}

Every axis has one size across the inputs; the batch axis is the first axis of every input and
of the output (it is never summed over or moved). The output is a `tensor`.
"""

from __future__ import annotations

import math

from ...core.declared import Field, field_validator
from ...core.types import BATCH, TensorType, batch_factor, dim_value, tensor
from ..axes_notation import AxesError, Equation, Side, input_terms, parse_equation
from ..base import Cost, Op, Params, RuleError
from ..registry import register
from ..dtypes import READS, FLOATS
from ..decoding import TOKENWISE, ByTypes, Decode, Mixes, kept_token_axis, register_decoding

MAX_INPUTS = 3
INPUT_NAMES = ("x", "y", "z")


class EinsumParams(Params):
    eq: str = Field(max_length=500, description="the equation in einops' notation, e.g. 'b h i d, b h j d -> b h i j'")

    @field_validator("eq")
    @classmethod
    def one_to_three_inputs(cls, eq: str) -> str:
        """The number of inputs is known before the equation is checked against them."""
        try:
            count = len(input_terms(eq))
        except AxesError as exc:
            raise ValueError(f"must read 'inputs -> output' ({exc.message})") from None
        if count > MAX_INPUTS:
            raise ValueError(f"must have 1 to {MAX_INPUTS} inputs before '->', separated by commas ({count} given)")
        return eq


class EinsumOp(Op):
    """torch.einsum over named axes (einops notation); the batch axis first everywhere."""

    primitive = "einsum"
    Params = EinsumParams

    def reads(self, p) -> tuple[str, ...]:
        return INPUT_NAMES[:len(input_terms(p.eq))]

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        equation = equation_of(p)
        check_batch_axis(equation)
        sizes = axis_sizes(equation, inputs, ctx.node.inputs)
        warn_lone_sums(equation, ctx)
        batch = BATCH if any(batch_factor(x.shape[0]) for x in inputs) else 1  # a parameter has batch 1 (B*k: infer)
        return tensor((batch,) + tuple(sizes[a] for a in equation.output.axes[1:]))  # [B, ...output axes]

    def cost(self, p, inputs, out, ctx) -> Cost:
        equation = equation_of(p)
        sizes = axis_sizes(equation, inputs, ctx.node.inputs)
        sizes[equation.output.axes[0]] = 1  # per sample
        return Cost(0, contraction_flops(equation, {a: dim_value(d) for a, d in sizes.items()}))


def equation_of(p) -> Equation:
    try:
        return parse_equation(p.eq)
    except AxesError as exc:
        raise RuleError(exc.message, hint=exc.hint, field="eq") from None


def lone_sums(equation: Equation) -> list[tuple[str, int]]:
    """(axis, input number) of each axis that one input alone has and the output drops, where
    there are several inputs: einsum sums it within that input before the product."""
    if len(equation.inputs) < 2:
        return []
    found = []
    for number, side in enumerate(equation.inputs, 1):
        for axis in dict.fromkeys(side.axes):
            elsewhere = any(axis in other.axes for other in equation.inputs if other is not side)
            if not elsewhere and axis not in equation.output.axes:
                found.append((axis, number))
    return found


def warn_lone_sums(equation: Equation, ctx) -> None:
    """A warning for an axis summed within one input alone ('b d i, b e j -> b i j': d and e
    each summed apart, a typo of one shared axis in three user trials, checked clean): legal,
    and rarely meant in a product."""
    found = lone_sums(equation)
    if not found or not hasattr(ctx, "warn"):
        return
    words = ", ".join(f"'{axis}' within input {number}" for axis, number in found)
    ctx.warn(f"'{equation.text}' sums {words} alone, before the product: each such sum is taken apart from the "
             "other inputs", field="eq",
             hint="a misspelt shared axis? give it one name in both inputs; to sum one input's axis on purpose, a "
                  "`reduce: {fn: sum}` before the einsum says so")


def check_batch_axis(equation: Equation) -> None:
    """The first axis of the first input is the batch; it leads every input and the output."""
    batch = equation.inputs[0].axes[0]
    for i, side in enumerate(equation.inputs):
        if side.axes[0] != batch:
            raise RuleError(f"input {i + 1} '{side.text}' must start with the batch axis '{batch}'", field="eq",
                            hint=f"archspec's tensors are batch first: write '{batch}' first in every input")
    if batch not in equation.output.axes:
        raise RuleError(f"'{equation.text}' sums over the batch axis '{batch}'", field="eq",
                        hint=f"keep '{batch}' first in the output; each sample is computed on its own")
    if equation.output.axes[0] != batch:
        raise RuleError(f"'{equation.text}' moves the batch axis '{batch}' from first place in the output",
                        field="eq", hint=f"write '{batch}' first in the output")


def axis_sizes(equation: Equation, inputs: list[TensorType], names) -> dict:
    """The size of every axis, the same in every input that has it (the batch may be 1 in one)."""
    sizes, seen_in = {}, {}
    for i, (side, x) in enumerate(zip(equation.inputs, inputs)):
        if len(x.shape) != side.rank:
            raise RuleError(f"input {i + 1} ({names[i]}) is {x.describe()}, rank {len(x.shape)}; '{side.text}' "
                            f"names {side.rank} axes", field="eq", hint="name one axis per dimension of the input")
        for axis, size in zip(side.axes[1:], x.shape[1:]):
            if axis in sizes and sizes[axis] != size:
                j = seen_in[axis]
                raise RuleError(f"axis '{axis}' is {sizes[axis]} in input {j + 1} ({names[j]}) and {size} in "
                                f"input {i + 1} ({names[i]})", field="eq",
                                hint="an axis has one size: rename one of them if they are different axes")
            sizes.setdefault(axis, size)
            seen_in.setdefault(axis, i)
    sizes[equation.inputs[0].axes[0]] = BATCH
    return sizes


def pairwise(equation: Equation) -> list[Equation]:
    """The equation as torch.einsum contracts it, one pair of inputs at a time, left to right:
    three inputs are two steps, the first keeping the axes the second or the output needs
    (done explicitly, so that an installed opt_einsum cannot reorder them and change the FLOPs)."""
    if len(equation.inputs) < 3:
        return [equation]
    first, second, third = equation.inputs
    needed = set(third.axes) | set(equation.output.axes)
    kept = tuple(a for a in dict.fromkeys(first.axes + second.axes) if a in needed)
    middle = Side(" ".join(kept), tuple((a,) for a in kept))
    return [Equation(f"{first.text}, {second.text} -> {middle.text}", (first, second), middle),
            Equation(f"{middle.text}, {third.text} -> {equation.output.text}", (middle, third), equation.output)]


def contraction_flops(equation: Equation, sizes: dict[str, int]) -> int:
    """What FlopCounterMode counts for torch.einsum: each pair of inputs is one batched matmul,
    2 * (batch * M * N) * K FLOPs, K the product of the axes summed over (in both operands, not
    in the step's output); axes in one operand only are summed before (not counted), and a step
    with no summed axis above size 1 is an element-wise product (not counted either)."""
    flops = 0
    for step in pairwise(equation):
        if len(step.inputs) < 2:
            continue
        left, right, out = (set(side.axes) for side in step.inputs + (step.output,))
        k = math.prod(sizes[a] for a in (left & right) - out)
        if k > 1:
            flops += 2 * math.prod(sizes[a] for a in out) * k
    return flops


EINSUM = register(EinsumOp())
READS.register(EINSUM, FLOATS)
SUMS_TOKENS = "an einsum may sum over the tokens (it keeps them apart when every input's token axis is one name the " \
              "output keeps, and the length is symbolic)"


def einsum_decoding(p, types) -> Decode:
    """Tokenwise where every input's token axis is one name the output keeps (`b l c, b l e -> b
    l e c`, the Llama 4 trial's); else it may mix the tokens."""
    try:
        equation = parse_equation(p.eq)
    except AxesError:
        return Mixes(SUMS_TOKENS)
    sides = [side.axes for side in equation.inputs]
    return TOKENWISE if kept_token_axis(sides, types, equation.output.axes) else Mixes(SUMS_TOKENS)


register_decoding(EINSUM, ByTypes(einsum_decoding, SUMS_TOKENS))
