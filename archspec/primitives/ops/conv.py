"""conv: a general convolution, 2-D over an image or a token grid, or 1-D along tokens.

    conv: {dim: 2, out: 768, kernel: 3, stride: 1, padding: 1, dilation: 1, groups: 1, bias: true}

dim 2 reads an image [B, C, H, W], or a token grid without class tokens read as an image, and
gives the layout it read (a token grid gives a token grid of the new grid size, so PVT v2's /
CPVT's position generator `x + dwconv(x)` is a conv and an add). dim 1 reads tokens [B, N, C]
and convolves along N (`causal: true` pads on the left only, as Mamba's and Hyena's short
convolutions do). `out` defaults to the input's channels; `groups: depthwise` is one group per
channel. Kernel, stride, padding and dilation are an int or a pair [h, w] (dim 2); `padding:
same` keeps the size at stride 1 (an even reach is padded one more after than before, as torch
does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Union

from ...core.declared import Field
from ...core.suggestions import Divides, GridOrigin, Remedy
from ...core.types import Sym, TensorType, grid_tokens, image, shifted, tokens
from ..activations import Function, learned_params
from ..base import Cost, Eps, NonNegSize, Op, Params, PositiveInt, PositiveSize, RuleError, check_padding_mask
from ..grids import as_image, divisors
from ..registry import register
from ..dtypes import READS, FLOAT_FIRST
from ..decoding import TOKENWISE, Mixes, RecentInputs, register_decoding


def one_d_hint(x: TensorType) -> str | None:
    """How to give a 1-D conv the tokens it reads: an image is dim: 2's; a signal [B, N] (raw
    audio) is tokens of one channel after a rearrange."""
    if x.layout == "image":
        return "use dim: 2 to convolve an image"
    if len(x.shape) == 2:
        return "a signal [B, N] is tokens of one channel: `rearrange: {pattern: 'b n -> b n 1', as: tokens}` first"
    if len(x.shape) == 3:  # a signal channels first [B, C, N] (torch's Conv1d), or a tensor of rank 3
        return ("tokens are [B, N, C], channels last: a signal channels first [B, C, N] is `rearrange: {pattern: "
                "'b c n -> b n c', as: tokens}` first (a rank-3 tensor of channels last: `as: tokens`)")
    return None


class ConvParams(Params):
    dim: Literal[1, 2] = Field(2, description="2: over an image or a token grid; 1: along the tokens")
    out: PositiveInt | None = Field(None, description="output channels (default: the input's channels)")
    kernel: PositiveSize = Field(description="kernel size: an int, or [kh, kw] (dim 2)")
    stride: PositiveSize = Field(1, description="an int, or [sh, sw] (dim 2)")
    padding: Union[NonNegSize, Literal["same"]] = Field(
        0, description="zeros on each side: an int, [ph, pw] (dim 2), or same (stride 1: the output keeps the size)")
    dilation: PositiveSize = Field(1, description="spacing of the kernel's taps: an int, or [dh, dw] (dim 2)")
    groups: Union[PositiveInt, Literal["depthwise"]] = Field(
        1, description="channel groups; depthwise: one group per input channel")
    bias: bool = True
    causal: bool = Field(False, description="dim 1: pad (kernel - 1) * dilation on the left only, so no output "
                                            "reads a later token")
    padding_mask: bool = Field(False, description="dim 1: read a padding mask [B, L] (1 keeps a token, 0 pads) as "
                                                  "the last input; a padded token's input reads as zeros (Hugging "
                                                  "Face's apply_mask_to_padding_states before LFM2's and Mamba's "
                                                  "short conv); generate feeds its own attention_mask for it")
    weight_norm: int | None = Field(None, ge=0, le=3,
                                    description="the weight as g * v / ||v||, the norm over every axis of v but this "
                                                "one (torch's weight_norm and its `dim`: Wav2Vec2's positional conv, "
                                                "2, the kernel's axis): parameters `conv.weight_g` and "
                                                "`conv.weight_v` in place of `conv.weight`; none: a plain weight")
    norm: Literal["none", "batch"] = Field("none", description="batch: a BatchNorm over the output channels after "
                                                               "the conv (`norm.weight`, `.bias`, `.running_mean`, "
                                                               "...), as a ConvModule's (mmseg, Hugging Face's "
                                                               "UperNetConvModule, timm's ConvNormAct)")
    norm_eps: Eps = Field(1e-5, description="the BatchNorm's epsilon")
    act: Function | None = Field(None, description="an activation after the conv (and its norm); none: none")


@dataclass(frozen=True)
class Geometry:
    """One entry per convolved axis (H, W or N): kernel, stride, dilation, and the zeros padded
    (before, after)."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]

    def reach(self, axis: int) -> int:
        """How many input positions one output reads along `axis`, dilation included."""
        return self.dilation[axis] * (self.kernel[axis] - 1) + 1

    def out_sizes(self, sizes: tuple) -> tuple:
        """The output size along each axis (sizes may be torch SymInts while exporting)."""
        return tuple((n + before + after - self.reach(axis)) // self.stride[axis] + 1
                     for axis, (n, (before, after)) in enumerate(zip(sizes, self.pads)))

    def keeps_size(self) -> bool:
        """Whether every output size equals its input size, whatever the input."""
        return all(self.stride[axis] == 1 and sum(self.pads[axis]) == self.reach(axis) - 1
                   for axis in range(len(self.kernel)))


def per_axis(p, name: str, op: str = "conv") -> tuple[int, ...]:
    """A size parameter of a conv (or `op`, conv_transpose) as one value per axis (an int is the
    same on every axis)."""
    value = getattr(p, name)
    if isinstance(value, int):
        return (value,) * p.dim
    if p.dim == 1:
        raise RuleError(f"a 1-D {op} takes one {name}, got the pair {value}", field=name,
                        hint=Remedy(f"use {name}: {value[0]}"))
    return tuple(value)


def padding_of(p: ConvParams, kernel: tuple[int, ...], stride: tuple[int, ...],
               dilation: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(before, after) zeros per axis: causal (all on the left), same, or as given."""
    keeping = [d * (k - 1) for k, d in zip(kernel, dilation)]  # reach - 1: the zeros that keep the size
    if p.causal:
        if p.dim != 1:
            raise RuleError("causal is for a 1-D conv along the tokens", field="causal",
                            hint=Remedy("use dim: 1, or drop causal"))
        if p.padding != 0:
            raise RuleError("causal pads (kernel - 1) * dilation on the left itself; give no padding with it",
                            field="padding", hint=Remedy("drop padding"))
        return ((keeping[0], 0),)
    if p.padding == "same":
        if any(s != 1 for s in stride):
            raise RuleError(f"padding: same keeps the size only at stride 1, got stride {p.stride}", field="padding",
                            hint=Remedy("use stride: 1, or give the padding as a number"))
        return tuple((r // 2, r - r // 2) for r in keeping)
    pads = per_axis(p, "padding")
    for axis, pad in enumerate(pads):
        if pad > keeping[axis]:
            uneven = p.dim == 2 and keeping[0] != keeping[1]  # a [3, 1] kernel: name the axis, give a pair
            along = f" along the {('height', 'width')[axis]} (kernel {kernel[axis]})" if uneven else ""
            fits = [min(pad, most) for pad, most in zip(pads, keeping)]
            per_axis_hint = (f"give it per axis: padding: [{fits[0]}, {fits[1]}]; "
                             if uneven and isinstance(p.padding, int) else "")
            raise RuleError(f"padding {pad}{along} is not smaller than the kernel's reach {keeping[axis] + 1}: the "
                            "outputs at the border would read padding only", field="padding",
                            hint=Remedy(f"{per_axis_hint}use a padding of at most {keeping[axis]} there; padding: "
                                        "same keeps the size at stride 1"))
    return tuple((pad, pad) for pad in pads)


def geometry(p: ConvParams) -> Geometry:
    """The convolution's geometry per axis, or RuleError naming the parameter."""
    kernel, stride, dilation = per_axis(p, "kernel"), per_axis(p, "stride"), per_axis(p, "dilation")
    return Geometry(kernel, stride, dilation, padding_of(p, kernel, stride, dilation))


def groups_of(p: ConvParams, channels: int) -> int:
    return channels if p.groups == "depthwise" else p.groups


def check_channels(p: ConvParams, channels: int) -> None:
    """Groups divide both the input and the output channels."""
    groups = groups_of(p, channels)
    if channels % groups:
        fitting = tuple(divisors(channels))
        nearest = tuple(sorted(sorted(fitting, key=lambda d: (abs(d - groups), d))[:6]))
        raise RuleError(f"{groups} groups do not divide the {channels} input channels", field="groups",
                        hint=Divides("group count", channels, shown=nearest, candidates=fitting))
    out = p.out or channels
    if out % groups:
        below, above = out // groups * groups, (out // groups + 1) * groups
        nearest = f"{below} or {above}" if below else str(above)
        raise RuleError(f"out {out} is not a multiple of the {groups} groups", field="out",
                        hint=Remedy(f"use an out that is a multiple of {groups} ({nearest})"))


def conv_length(g: Geometry, length: Sym) -> Sym:
    """The output length of a 1-D conv over a symbolic length, named by its formula and bounded by
    the conv of its bounds (audio of any length: Wav2Vec2's, WavLM's, Speech2Text's strided convs;
    both trials had to build once per length). Its shortest must give an output."""
    (before, after) = g.pads[0]
    if g.reach(0) > length.lo + before + after:
        raise RuleError(f"kernel {g.kernel[0]} is larger than the shortest {length} ({length.lo}) padded to "
                        f"{length.lo + before + after}: the output would be empty", field="kernel",
                        hint=Remedy(f"declare {length} from at least {g.reach(0) - before - after} (`dims:`)"))
    offset = before + after - g.reach(0)
    if g.stride[0] == 1:
        return shifted(length, offset + 1)  # L + pads - reach + 1
    (lo,), (hi,) = g.out_sizes((length.lo,)), g.out_sizes((length.hi,))
    return Sym(f"({shifted(length, offset).name})//{g.stride[0]}+1", lo, hi)


def check_fits(g: Geometry, sizes: tuple[int, ...], origin: GridOrigin | None) -> None:
    """Every axis, padded, is at least as long as the kernel's reach (else the output is empty)."""
    for axis, (n, (before, after)) in enumerate(zip(sizes, g.pads)):
        padded = n + before + after
        if g.reach(axis) > padded:
            shown = "x".join(map(str, sizes))
            dilated = f" (reach {g.reach(axis)} with dilation {g.dilation[axis]})" if g.dilation[axis] > 1 else ""
            largest = (padded - 1) // g.dilation[axis] + 1
            raise RuleError(f"kernel {g.kernel[axis]}{dilated} is larger than the {shown} input padded to "
                            f"{padded}: the output would be empty", field="kernel", grid=origin,
                            hint=Remedy(f"use a kernel of at most {largest}, or give a longer input (at least "
                                        f"{g.reach(axis) - before - after} along that axis, padded as it is)"))


def check_conv_padding_mask(p, x: TensorType, mask: TensorType) -> None:
    """A 1-D conv's padding mask: int64 [B, L], one value per token."""
    if p.dim != 1:
        raise RuleError("padding_mask goes with a 1-D conv along the tokens", field="padding_mask",
                        hint=Remedy("use dim: 1, or drop padding_mask"))
    check_padding_mask(mask, x.length, "tokens")


def grid_step(g: Geometry) -> tuple:
    """How a GridOrigin names this conv: (kernel, stride), or per axis when they differ."""
    if len(set(g.kernel)) == 1 and len(set(g.stride)) == 1:
        return (g.kernel[0], g.stride[0])
    return g.kernel + g.stride


class ConvOp(Op):
    """2-D over an image or a token grid (giving the layout it read), or 1-D along tokens [B, N, C]."""

    primitive = "conv"
    Params = ConvParams

    def reads(self, p) -> tuple[str, ...]:
        return ("x", "mask") if p.padding_mask else ("x",)

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        x = inputs[0]
        g = geometry(p)
        self.check_weight_norm(p)
        if p.padding_mask:
            check_conv_padding_mask(p, x, inputs[1])
        return self.image_shape(p, g, x) if p.dim == 2 else self.sequence_shape(p, g, x)

    def value_range(self, p, slot: int, ctx) -> int | None:
        return 2 if p.padding_mask and slot == 1 else None  # the mask is 0 or 1

    def image_shape(self, p, g: Geometry, x: TensorType) -> TensorType:
        if x.layout == "tokens" and not x.grid:
            raise RuleError(f"a 2-D conv reads an image or a token grid, got {x.layout_name()}", field="dim",
                            hint=Remedy("use dim: 1 to convolve along the tokens"))
        channels, size, origin = as_image(x, "a 2-D conv")
        check_channels(p, channels)
        check_fits(g, size, origin)
        grid = g.out_sizes(size)  # (H, W) -> (H', W')
        step = origin if grid == size else origin.then("conv", *grid_step(g))
        out = p.out or channels
        if x.layout == "image":
            return image(out, grid[0], grid[1], origin=step)  # [B, out, H', W']
        return grid_tokens(grid, out, origin=step)  # [B, H'W', out]

    def check_weight_norm(self, p) -> None:
        if p.weight_norm is not None and p.weight_norm > p.dim + 1:
            raise RuleError(f"weight_norm {p.weight_norm} is not an axis of a {p.dim}-D conv's weight [out, in / "
                            f"groups, {'kernel' if p.dim == 1 else 'kh, kw'}]", field="weight_norm",
                            hint=f"an axis from 0 to {p.dim + 1}: {p.dim + 1} is the kernel's last")

    def sequence_shape(self, p, g: Geometry, x: TensorType) -> TensorType:
        if x.layout != "tokens":
            hint = one_d_hint(x)
            raise RuleError(f"a 1-D conv reads tokens [B, N, C], got {x.layout_name()}", field="dim",
                            hint=Remedy(hint) if hint else None)
        check_channels(p, x.channels)
        out = p.out or x.channels
        if g.keeps_size():
            return replace(x, shape=(x.shape[0], x.length, out))  # [B, N, out], the grid kept
        if isinstance(x.length, Sym):
            return tokens(conv_length(g, x.length), out)  # [B, N', out]: N' = (N + pads - reach) // stride + 1
        check_fits(g, (x.length,), None)
        (length,) = g.out_sizes((x.length,))
        return tokens(length, out)  # [B, N', out]

    def cost(self, p, inputs: list[TensorType], out: TensorType, ctx) -> Cost:
        x = inputs[0]
        channels = as_image(x, "a 2-D conv")[0] if p.dim == 2 else x.channels
        fan_in = channels // groups_of(p, channels)
        for k in geometry(p).kernel:
            fan_in *= k
        width = out.channels
        positions = out.row_numel() // width  # H'W' or N' per row of the batch (symbolic lengths at their longest)
        norm = weight_norm_params(p, (width, channels // groups_of(p, channels)) + geometry(p).kernel)
        after = (2 * width if p.norm == "batch" else 0) + (learned_params(p.act) if p.act else 0)  # FLOPs: torch counts none
        return Cost(fan_in * width + (width if p.bias else 0) + norm + after, 2 * fan_in * width * positions)


def weight_norm_params(p, weight_shape: tuple[int, ...]) -> int:
    """The weight norm's g, one value along the axis kept (0 without weight_norm)."""
    return 0 if p.weight_norm is None else weight_shape[p.weight_norm]


CONV = register(ConvOp())
READS.register(CONV, FLOAT_FIRST)
def conv_decoding(p):
    """DECODE of a conv: a causal 1-D conv of stride 1 reads the (kernel - 1) * dilation inputs
    before each token, which generate keeps (RecentInputs); any other reads later tokens, or
    drops some."""
    if p.dim == 1 and p.causal:
        g = geometry(p)
        if g.kernel[0] == 1:
            return TOKENWISE
        if g.stride[0] == 1:
            return RecentInputs(lambda q: (geometry(q).kernel[0] - 1) * geometry(q).dilation[0],
                                key_padding=lambda q: q.padding_mask)
        return Mixes(f"a causal conv of stride {g.stride[0]} gives an output for every {g.stride[0]}th token only")
    later = "" if p.dim == 2 else " (`causal: true` reads earlier ones only, and decodes)"
    return Mixes("a conv reads the tokens around each one" + later)


register_decoding(CONV, conv_decoding)
