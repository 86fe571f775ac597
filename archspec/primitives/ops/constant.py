"""constant: a fixed tensor (reads nothing, learns nothing). Like `param`, its shape is given
without the batch and it comes out with 1 there, so it broadcasts over the batch in add,
multiply, subtract and divide: `shape: [8]` is `[1, 8]`. It is a buffer of the module, not a
parameter (counted in the node's buffer bytes).

    constant: {shape: [8], value: 0.5}      every value 0.5
    constant: {shape: [8], fill: ones}      zeros (the default), ones, or
    constant: {shape: [4, 4], fill: eye}    ones on the diagonal of the last two axes
    constant: {shape: [14, 14], fill: index, along: 2}   each value its index along axis 2 (0..13):
                                            the column of a 14x14 grid (along: 1 the row)
    constant: {shape: [1568, 384], fill: sinusoid}   Vaswani et al.'s table, a row per position:
                                            sin and cos side by side (VideoMAE's, added to its tokens)

`fill: index` (XLA's iota) is the generator of coordinate tensors: grid positions, offsets
between positions (two of them subtracted: ConViT's relative indices), frequencies (with
`power`), each made from it with the element-wise ops. Axes count from the batch (0), as
`slice`'s do, so the first axis of `shape` is 1; negative ones count from the end.

A size may be a dim declared under `dims` (`L`): the constant is then built at run time, at
the length of the tensor it reads (`from:`, any node or input with an axis of that size), so
one build runs, and exports, at every length in range. A causal mask (1 where a key comes after
its query) from two index constants:

    - {id: query_at, from: x, constant: {shape: [L, L], fill: index, along: 1}}   # [1, L, L]: the row
    - {id: key_at, from: x, constant: {shape: [L, L], fill: index}}               # the column
    - {id: ahead, from: [key_at, query_at], subtract: {}}
    - {id: future, compare: {op: gt, value: 0}}                                   # [1, L, L] 0/1
"""

from __future__ import annotations

from typing import Literal, Union

from ...core.declared import Field
from ...core.types import BATCH, DTYPE_BYTES, Sym, TensorType, tensor
from ..base import Cost, MAX_SIZE, Op, Params, PositiveInt, RuleError
from ..registry import register
from ..dtypes import READS, ANY
from ..decoding import NO_TOKENS, Mixes, register_decoding


MAX_VALUES = 65_536  # numbers a spec may list for one constant: a table, not a checkpoint


class ConstantParams(Params):
    shape: list[Union[PositiveInt, str]] = Field(
        min_length=1, max_length=6, description="the tensor's shape without the batch: sizes, or dims declared under "
                                                "`dims` (taken at run time from the tensor the node reads)")
    fill: Literal["zeros", "ones", "eye", "index", "lowest", "sinusoid"] | None = Field(
        None, description="zeros, ones, eye (an identity on the last two axes), index (each value its index "
                          "along `along`), lowest (the lowest finite value of the model's floating dtype: "
                          "float32's, bfloat16's once the model is cast, as Hugging Face's finfo(dtype).min masks), "
                          "or sinusoid (shape [positions, width]: a fixed sinusoid table, made in float64 and "
                          "rounded once, laid out as `sincos_layout` says); default zeros, or `value`")
    value: float | None = Field(None, allow_inf_nan=False, description="every value this number (instead of fill)")
    values: list[float] | None = Field(None, min_length=1, max_length=MAX_VALUES,
                                       description="each value, in order, the last axis fastest (instead of fill): a "
                                                   "small fixed table, as an image's per-channel mean [0.4488, "
                                                   "0.4371, 0.4040] with shape [3, 1, 1]")
    along: int | None = Field(None, description="fill: index: the axis whose index is the value (1 is the first "
                                                "axis of shape, -1 the last; the default)")
    sincos_layout: Literal["interleaved", "halves", "fairseq"] = Field(
        "interleaved", description="fill: sinusoid: each frequency's sin and cos side by side (interleaved: Vaswani "
                                   "et al.'s formula, VideoMAE's and ViViT's get_sinusoid_encoding_table), all the "
                                   "sines then all the cosines (halves: Marian's), or so at the frequencies "
                                   "10000^(-i/(d/2 - 1)) (fairseq: Whisper's), as embed's option of that name")


def symbolic(p) -> bool:
    """Whether a size of the constant is a declared dim (it is built at run time from `like`)."""
    return any(isinstance(size, str) for size in p.shape)


def sizes(p, dims: dict) -> tuple:
    """The shape without the batch, each dim name as its Sym; RuleError for a name that is no
    declared dim, or the batch."""
    out = []
    for size in p.shape:
        if isinstance(size, int):
            out.append(size)
            continue
        name = size.strip()
        if name.startswith("${") and name.endswith("}"):
            name = name[2:-1].strip()
        if name == BATCH.name:
            raise RuleError("a constant's batch is 1 (it broadcasts over the batch); B is not one of its sizes",
                            field="shape", hint="give the sizes after the batch: numbers or declared dims such as L")
        if name not in dims:
            declared = ", ".join(n for n in dims if n != BATCH.name)
            raise RuleError(f"unknown size '{size}' in the constant's shape", field="shape",
                            hint="sizes are positive numbers or a dim declared under `dims`"
                                 + (f" (here: {declared})" if declared else " (this spec declares none)"))
        out.append(dims[name])
    return tuple(out)


def sources(p, like: TensorType | None, dims: dict) -> tuple:
    """Per axis after the batch, where its size comes from at run time: a number, or ("like",
    axis), the axis of `like` that has that dim."""
    return tuple(("like", tuple(like.shape).index(size)) if isinstance(size, Sym) else size
                 for size in sizes(p, dims))


def index_axis(p) -> int:
    """The axis of the constant (the batch is 0) whose index `fill: index` writes; RuleError for
    the batch or an axis the constant does not have."""
    rank = len(p.shape) + 1
    along = -1 if p.along is None else p.along
    if not -rank <= along < rank or along % rank == 0:
        raise RuleError(f"axis {along} is not an axis of the constant [1, {', '.join(map(str, p.shape))}] other "
                        f"than the batch", field="along",
                        hint=f"axes 1 to {rank - 1} (1 is the first of shape), or -1 to -{rank - 1} from the end")
    return along % rank


def check_values(p, shape: tuple) -> None:
    """`values`: alone (no fill or value), one per place of a shape of numbers."""
    given = [name for name in ("fill", "value") if getattr(p, name) is not None]
    if given:
        raise RuleError(f"a constant takes `values` or `{given[0]}`, not both", field="values")
    if any(isinstance(size, Sym) for size in shape):
        raise RuleError("`values` lists every value, and this shape has a size taken at run time", field="values",
                        hint="give the shape as numbers")
    count = 1
    for size in shape:
        count *= size
    if len(p.values) != count:
        raise RuleError(f"`values` gives {len(p.values)} numbers, and shape [{', '.join(map(str, shape))}] holds "
                        f"{count}", field="values")  # (NaN and infinity are refused as the file is read)


def check_sinusoid(p, shape: tuple) -> None:
    """`fill: sinusoid`: a table [positions, width] of numbers, the width even."""
    described = ", ".join(map(str, p.shape))
    if len(shape) != 2:
        raise RuleError(f"a sinusoid table has two axes, positions and width; got shape [{described}]", field="shape",
                        hint="shape: [positions, width]; it comes out [1, positions, width], added to tokens")
    if any(isinstance(size, Sym) for size in shape):
        raise RuleError(f"a sinusoid table is made once, at build, and shape [{described}] has a size taken at run "
                        "time", field="shape", hint="give the positions as a number (the longest the model reads), "
                                                    "and slice the rows a shorter input needs")
    if shape[1] % 2:
        raise RuleError(f"a sinusoid table pairs each sine with a cosine, and its width {shape[1]} is odd",
                        field="shape", hint="give an even width")


class ConstantOp(Op):
    """A fixed tensor of the given shape (batch dimension 1, so it broadcasts), layout `tensor`."""

    primitive = "constant"

    def one_grid(self, p) -> str | None:
        return "a constant"
    Params = ConstantParams

    def reads(self, p) -> tuple[str, ...]:
        return ("like",) if symbolic(p) else ()  # a tensor with the dims the shape names

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        shape = sizes(p, ctx.graph.dims)
        if inputs:
            like = inputs[0]
            for size in shape:
                if isinstance(size, Sym) and size not in tuple(like.shape):
                    raise RuleError(f"the constant's size {size} is taken at run time from the tensor it reads, and "
                                    f"{like.layout_name()} {like.describe()} has no axis of size {size}",
                                    field="from", hint=f"read an input or node that has it: `from: ...` one of "
                                                       f"size {size}")
        if p.fill is not None and p.value is not None:
            raise RuleError(f"a constant is filled with {p.fill} or with a value, not both", field="value",
                            hint="give `fill: zeros | ones | eye | index` or `value: NUMBER`")
        if p.values is not None:
            check_values(p, shape)
        if p.fill == "eye" and len(p.shape) < 2:
            raise RuleError(f"an identity needs two axes, got shape [{', '.join(map(str, p.shape))}]", field="shape",
                            hint="give the last two sizes, e.g. shape: [4, 4]")
        if p.fill == "sinusoid":
            check_sinusoid(p, shape)
        elif p.sincos_layout != "interleaved":
            raise RuleError("`sincos_layout` lays out a sinusoid table", field="sincos_layout",
                            hint="add fill: sinusoid, or leave sincos_layout out")
        if p.along is not None and p.fill != "index":
            raise RuleError("`along` names the axis of `fill: index`", field="along",
                            hint="add fill: index, or leave along out")
        if p.fill == "index":
            axis = index_axis(p)
            if shape[axis - 1] == 1:
                ctx.warn(f"fill: index along axis {axis}, of size 1: every value is 0", field="along",
                         hint="`along` counts from the batch: 1 is the first axis of shape, -1 the last")
        count = 1
        for size in shape:
            count *= size.hi if isinstance(size, Sym) else size
        if count > MAX_SIZE * 64:
            raise RuleError(f"a constant of {count:,} values is beyond archspec's limit", field="shape")
        return tensor((1, *shape))  # [1, ...]

    def cost(self, p, inputs, out, ctx) -> Cost:
        if symbolic(p):
            return Cost(0, 0)  # made at each call at the length it reads: no buffer kept
        return Cost(0, 0, buffer_bytes=out.max_numel() * DTYPE_BYTES[out.dtype])


def constant_decoding(p: ConstantParams):
    """No tokens read, unless a size is a symbolic length: then it spans the whole sequence."""
    return Mixes("a constant sized by a symbolic length spans the whole sequence, and generate brings one token "
                 "at a time") if symbolic(p) else NO_TOKENS


CONSTANT = register(ConstantOp())
READS.register(CONSTANT, ANY)
register_decoding(CONSTANT, constant_decoding)
