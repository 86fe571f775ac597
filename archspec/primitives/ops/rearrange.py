"""rearrange: split, move and merge the axes of one tensor, in einops' notation:

    - {id: heads, rearrange: {pattern: "b n (h d) -> b h n d", sizes: {h: 12}}}
    - {id: tokens, rearrange: {pattern: "b c h w -> b (h w) c"}}      # tokens on the h x w grid
    - {id: image, rearrange: {pattern: "b (h w) c -> b c h w"}}       # h, w from the token grid

No axis is created or dropped (only size-1 dimensions, written `1`). The first dimension is the
batch on both sides; other axes may fold into it and unfold out of it, so that per-frame,
per-patch or per-channel work runs through the ordinary primitives:

    - {id: frames, rearrange: {pattern: "b t c h w -> (b t) c h w", as: image}}   # [B, T, C, H, W] -> [B*T, C, H, W]
    - {id: by_time, rearrange: {pattern: "(b t) n c -> (b n) t c", sizes: {t: 8}, as: tokens}}  # [B*8, N, C] -> [B*N, 8, C]

The batch axis is the one axis of the first group whose size is not given, and it comes first
in that group on both sides (`(b t)`, never `(t b)`: each sample's rows stay together, so an
unfold in another order cannot mix the samples); the folded batch stays symbolic (`B*8`: B times
the axes folded in, which must be fixed numbers), and axes unfolded out of it must divide what
was folded in, along the boundaries of the axes folded in (their sizes and, where they keep the
fold's names, their order). In a group, at most one axis size is
unknown: it is inferred from the dimension, the others are given under `sizes` (or, for the
two axes of a token grid's `(h w)`, read from the grid).

The output layout (`as`): `tensor`, `image` ([B, C, H, W]) or `tokens` ([B, N, C]). Without
`as`, a rearrange that keeps the input's spatial axes keeps its layout's meaning: an image's
(or a token grid's) rows and columns flattened into the tokens give tokens on that grid
(`b c h w -> b (h w) c`, or `b c (h p) (w q) -> b (h w) (p q c)` on the patch grid), and a
token grid's rows and columns as the last two axes of a rank-4 output give an image; anything
else gives a `tensor`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

from ...core.declared import Field
from ...core.suggestions import GridOrigin
from ...core.types import Sym, TensorType, batch_factor, batch_times, folded_names, folded_parts
from ..axes_notation import AXIS_NAME, AxesError, Pattern, parse_pattern
from ..base import Cost, Op, Params, PositiveInt, RuleError
from ..grids import divisors, divisors_near, grid_origin, image_origin, nearest_input
from ..registry import register
from ..index_ranges import VALUES, keeps
from ..dtypes import READS, ANY
from ..decoding import TOKENWISE, ByTypes, Decode, Mixes, kept_token_axis, register_decoding

AxisName = Annotated[str, Field(pattern=f"^{AXIS_NAME.pattern}$")]


class RearrangeParams(Params):
    pattern: str = Field(max_length=500, description="einops pattern, e.g. 'b (h w) c -> b c h w'")
    sizes: dict[AxisName, PositiveInt] = Field({}, description="sizes of axes the input does not fix, e.g. {h: 14}")
    layout: Literal["tensor", "image", "tokens"] | None = Field(
        None, alias="as", description="the output's layout; default: tokens or an image where the pattern keeps "
                                      "the input's grid, else tensor")


@dataclass(frozen=True)
class Plan:
    """How one input is rearranged: the parsed pattern, every axis's size, the input dimension
    whose two axes are read from the input's token grid (`grid_dim`), and the input's row and
    column groups (`spatial`: an image's last two dimensions, or a token grid's two axes)."""

    pattern: Pattern
    sizes: dict
    grid_dim: int | None
    spatial: tuple[tuple[str, ...], tuple[str, ...]] | None

    @property
    def shape(self) -> tuple:
        """The output shape."""
        return tuple(merged(group, self.sizes) for group in self.pattern.right.groups)

    def kept_grid(self) -> tuple[int, int] | None:
        """The output's token grid, when its tokens are the input's rows and columns, flattened."""
        right = self.pattern.right
        if self.spatial is None or right.rank != 3 or len(right.groups[1]) != 2:
            return None
        row, column = right.groups[1]
        if (row, column) != (self.spatial[0][0], self.spatial[1][0]):
            return None
        return self.sizes[row], self.sizes[column]

    def kept_image(self) -> bool:
        """Whether the output's last two dimensions are the input's rows and columns (of an
        image, or of a token grid)."""
        right = self.pattern.right
        return (self.spatial is not None and right.rank == 4
                and right.groups[2:] == tuple((group[0],) for group in self.spatial))


class RearrangeOp(Op):
    """Reshape and permute by an einops pattern; sizes inferred and checked."""

    primitive = "rearrange"
    Params = RearrangeParams
    moves_batch = True  # `(b t)` folds axes into the batch, `(b t) ... -> b t ...` unfolds them

    def shape(self, p, inputs: list[TensorType], ctx) -> TensorType:
        (x,) = inputs
        plan = plan_of(p, x)
        layout = p.layout or ("tokens" if plan.kept_grid() else "image" if plan.kept_image() else "tensor")
        return typed(layout, plan, x)

    def cost(self, p, inputs, out, ctx) -> Cost:
        return Cost(0, 0)


def plan_of(p: RearrangeParams, x: TensorType) -> Plan:
    """The plan for rearranging `x` (RuleError where the pattern does not fit it)."""
    try:
        pattern = parse_pattern(p.pattern)
    except AxesError as exc:
        raise RuleError(exc.message, hint=exc.hint, field="pattern") from None
    batch = batch_axis(pattern, p)
    if len(x.shape) != pattern.left.rank:
        raise RuleError(f"the input is {x.describe()}, rank {len(x.shape)}; '{pattern.left.text}' has "
                        f"{pattern.left.rank} dimensions", field="pattern",
                        hint="write one name or one (group) per dimension of the input")
    for axis in p.sizes:
        if axis not in pattern.left.axes:
            raise RuleError(f"`sizes` gives '{axis}', which is not an axis of '{pattern.text}'", field="sizes",
                            hint=f"the axes are {', '.join(pattern.left.axes[1:])}")
    grid_dim = grid_dimension(pattern, p, x)
    sizes = batch_sizes(pattern, batch, x.shape[0], p.sizes)
    for d, (group, dim) in enumerate(zip(pattern.left.groups, x.shape)):
        if d == 0:
            continue
        if d == grid_dim:
            sizes.update(zip(group, x.grid))
        else:
            origin = image_origin(x) if x.layout == "image" and d >= 2 else None  # a side the input size sets
            sizes.update(group_sizes(group, dim, d, p.sizes, pattern, origin))
    return Plan(pattern, sizes, grid_dim, spatial_groups(pattern, x, grid_dim))


def batch_axis(pattern: Pattern, p: RearrangeParams) -> str:
    """The batch axis: the one axis of the left side's first group whose size is not given
    (`b` of `b n c`, of `(b t) n c` with `t` given). It stays in the first group on the right,
    where any axis beside it is folded into the batch."""
    left, right = pattern.left, pattern.right
    first = left.groups[0]
    if not first:
        raise RuleError(f"'{left.text}' starts with 1; the first dimension is the batch", field="pattern",
                        hint="archspec's tensors are batch first: e.g. 'b n c -> ...'")
    unknown = [axis for axis in first if axis not in p.sizes]
    if len(unknown) != 1:
        written = f"({' '.join(first)})" if len(first) > 1 else first[0]
        if not unknown:
            raise RuleError(f"`sizes` gives every axis of '{written}'; the batch axis has the size of the input's "
                            "batch", field="sizes", hint=f"leave the batch axis '{first[0]}' out of `sizes`")
        raise RuleError(f"'{written}' leaves {' and '.join(repr(a) for a in unknown)} without a size; the first "
                        "dimension holds the batch axis and axes of given sizes", field="sizes" if p.sizes else "pattern",
                        hint=f"give every axis but the batch under `sizes`, e.g. sizes: {{{unknown[-1]}: ...}}")
    batch = unknown[0]
    if batch not in right.groups[0]:
        raise RuleError(f"'{pattern.text}' moves the batch axis '{batch}' out of the first dimension",
                        field="pattern", hint=f"write '{batch}' in the first dimension on the right, alone or "
                                              f"with the axes folded into the batch, e.g. '({batch} t) ...'")
    for group in (first, right.groups[0]):
        if group[0] != batch:  # (c b) unfolded as (b c) would mix the samples, and B*k cannot tell them apart
            written = " ".join(group)
            raise RuleError(f"'({written})' puts the batch axis '{batch}' after '{group[0]}': axes fold into the "
                            "batch behind it, each sample's rows together", field="pattern",
                            hint=f"write '({batch} {' '.join(a for a in group if a != batch)})', here and where the "
                                 "axes fold or unfold again")
    return batch


def batch_sizes(pattern: Pattern, batch: str, dim, given: dict) -> dict:
    """The sizes of the first group's axes: the given ones, and the batch axis with what is left
    of the input's batch `dim` (B*k) once they are unfolded out of it."""
    group = pattern.left.groups[0]
    folded = math.prod(given[axis] for axis in group if axis != batch)
    factor = batch_factor(dim)
    if factor is None:  # a param's (or constant's) batch of 1
        if folded != 1 or len(pattern.right.groups[0]) > 1:
            raise RuleError(f"the input has a batch of {dim} (a param or constant): it has no batch to fold axes "
                            "into or out of", field="pattern", hint="fold and unfold tensors that carry the batch B; "
                                                                    "a param broadcasts over B*k as it is")
        return {axis: given.get(axis, dim) for axis in group}
    if factor % folded:
        parts = ", ".join(f"{a}={given[a]}" for a in group if a != batch)
        hint = (f"fold the axes into the batch first ('{batch} t ... -> ({batch} t) ...')" if factor == 1
                else f"its batch holds {factor} rows per sample: give sizes whose product divides {factor}")
        raise RuleError(f"'({' '.join(group)})' unfolds {folded} rows per sample ({parts}) out of the batch {dim}",
                        field="sizes", hint=hint)
    unfolded = tuple(given[axis] for axis in group if axis != batch)
    check_unfold_boundaries(group, unfolded, folded_parts(dim), batch)
    check_unfold_names(group, batch, folded_names(dim))
    sizes = {axis: given[axis] for axis in group if axis != batch}
    left = parts_left(folded_parts(dim), folded)
    sizes[batch] = batch_times(factor // folded, left, folded_names(dim)[:len(left)])
    return sizes


def parts_left(parts: tuple[int, ...], unfolded: int) -> tuple[int, ...]:
    """The folded axes still in the batch once `unfolded` rows per sample come out of it (the
    innermost axes whose product that is); () where that is not known."""
    for i in range(len(parts) + 1):
        if math.prod(parts[i:]) == unfolded:
            return parts[:i]
    return ()


def check_unfold_names(group: tuple[str, ...], batch: str, names: tuple[str, ...]) -> None:
    """Axes unfolded under the names the fold gave them, in another order ((b wh ww) folded, (b ww
    wh) unfolded: with wh and ww of one size the rows check as well, and the windows come out
    transposed, the Qwen2.5-VL trial): a located error. Other names than the fold's are not read."""
    unfolded = tuple(axis for axis in group if axis != batch)
    if not names or len(unfolded) > len(names):
        return
    tail = names[len(names) - len(unfolded):]
    if set(unfolded) == set(tail) and unfolded != tail:
        raise RuleError(f"'({' '.join(group)})' unfolds {' '.join(unfolded)} out of a batch into which they were "
                        f"folded as {' '.join(tail)}: the rows would come out with those axes swapped",
                        field="pattern", hint=f"unfold them in the order they were folded: '({batch} {' '.join(tail)})'")


def check_unfold_boundaries(group: tuple[str, ...], unfolded: tuple[int, ...], parts: tuple[int, ...],
                            batch: str) -> None:
    """Axes unfolded out of a batch another rearrange folded: they must split its rows where its
    folded axes do, or at finer boundaries (t=8 folded, (t1 t2) of 2 and 4 unfolded), never across
    them ((t n) folded as 8 and 4, (n t) unfolded as 4 and 8: the sizes multiply the same, and
    each sample's rows would be read in the wrong order)."""
    if not unfolded or not parts:
        return
    total = math.prod(unfolded)
    tails = [math.prod(parts[i:]) for i in range(len(parts))]
    if total not in tails:
        return  # a product no tail of the folded axes has: batch_sizes' own checks speak for it
    tail = parts[tails.index(total):]
    if not (cumulative(unfolded) <= cumulative(tail) or cumulative(tail) <= cumulative(unfolded)):
        written = " ".join(a for a in group if a != batch)
        raise RuleError(f"'({' '.join(group)})' unfolds {' x '.join(map(str, unfolded))} ({written}) out of a batch "
                        f"whose rows were folded as {' x '.join(map(str, tail))}: the rows split across the axes "
                        "folded in, so each sample's rows would be read in another order", field="pattern",
                        hint="unfold the axes in the order they were folded into the batch, with their sizes")


def cumulative(sizes: tuple[int, ...]) -> set[int]:
    """The products of each leading run of `sizes`: where an axis boundary falls in the rows."""
    return {math.prod(sizes[:i + 1]) for i in range(len(sizes))}


def grid_dimension(pattern: Pattern, p: RearrangeParams, x: TensorType) -> int | None:
    """1 when the input is tokens on a grid without a prefix and the pattern reads their
    `(h w)` with neither size given: the two sizes are the grid's; else None."""
    left = pattern.left
    if x.layout != "tokens" or not x.grid or x.prefix or left.rank != 3 or len(left.groups[1]) != 2:
        return None
    return None if any(axis in p.sizes for axis in left.groups[1]) else 1


def spatial_groups(pattern: Pattern, x: TensorType, grid_dim: int | None):
    """The input's row and column groups: an image's last two dimensions (unless written 1),
    or a grid's two axes."""
    if x.layout == "image":
        rows, columns = pattern.left.groups[2:]
        return (rows, columns) if rows and columns else None
    if grid_dim is not None:
        row, column = pattern.left.groups[grid_dim]
        return (row,), (column,)
    return None


def group_sizes(group: tuple[str, ...], dim, d: int, given: dict, pattern: Pattern,
                origin: GridOrigin | None = None) -> dict:
    """The sizes of the axes of one input dimension of size `dim` (one may be unknown); `origin`:
    how the image whose side it is came about (the input size bears on a size that does not divide)."""
    written = f"({' '.join(group)})" if len(group) > 1 else " ".join(group) or "1"
    if isinstance(dim, Sym):
        if len(group) != 1 or group[0] in given:
            raise RuleError(f"dimension {d} has the symbolic size {dim}; '{written}' in '{pattern.left.text}' "
                            "would split it", field="pattern", hint="an axis of symbolic size can move, not split")
        return {group[0]: dim}
    unknown = [axis for axis in group if axis not in given]
    known = math.prod(given[axis] for axis in group if axis in given)
    if len(unknown) > 1:
        raise RuleError(f"cannot infer both {' and '.join(repr(a) for a in unknown[:2])} in '{written}' "
                        f"(dimension {d}, size {dim})", field="sizes" if given else "pattern",
                        hint=f"give all but one of {', '.join(unknown)} under `sizes`, e.g. "
                             f"sizes: {{{unknown[0]}: ...}}")
    if unknown and dim % known:
        parts = ", ".join(f"{a}={given[a]}" for a in group if a in given)
        raise RuleError(f"axis '{unknown[0]}' of '{written}': dimension {d} of size {dim} does not divide by "
                        f"{known} ({parts})", field="sizes", hint=f"give sizes whose product divides {dim} "
                                                                 f"({', '.join(map(str, divisors_near(dim, known)))})",
                        grid=origin, input=nearest_input(origin, dim, known))
    if not unknown and known != dim:
        parts = " * ".join(f"{a}={given[a]}" for a in group) or "1"
        raise RuleError(f"'{written}' is {known} ({parts}) but dimension {d} is {dim}", field="sizes",
                        hint=f"give sizes whose product is {dim}")
    sizes = {axis: given[axis] for axis in group if axis in given}
    sizes.update({axis: dim // known for axis in unknown})
    return sizes


def merged(group: tuple[str, ...], sizes: dict):
    """The size of an output dimension: the product of its axes (a symbolic one stands alone, but
    for the batch, into which axes of fixed sizes fold: B*k)."""
    if len(group) == 1:
        return sizes[group[0]]
    batch = [axis for axis in group if batch_factor(sizes[axis]) is not None and isinstance(sizes[axis], Sym)]
    if batch:
        others = [axis for axis in group if axis != batch[0]]
        inner = batch_factor(sizes[batch[0]])
        factor = inner * merged_fixed(others, sizes, group, "fold it into the batch")
        known = folded_parts(sizes[batch[0]]) if inner > 1 else ()
        parts = (*known, *(sizes[axis] for axis in others)) if inner == 1 or known else ()
        known_names = folded_names(sizes[batch[0]]) if inner > 1 else ()
        names = (*known_names, *others) if inner == 1 or known_names else ()
        return batch_times(factor, parts, names)
    return merged_fixed(group, sizes, group, "merge it")


def merged_fixed(axes, sizes: dict, group: tuple[str, ...], what: str) -> int:
    """The product of axes of fixed sizes (RuleError naming a symbolic one, which `group` would
    `what`)."""
    symbolic = [axis for axis in axes if isinstance(sizes[axis], Sym)]
    if symbolic:
        raise RuleError(f"axis '{symbolic[0]}' has the symbolic size {sizes[symbolic[0]]}; '({' '.join(group)})' "
                        f"would {what}", field="pattern", hint="an axis of symbolic size can move, not merge")
    return math.prod(sizes[axis] for axis in axes)


def typed(layout: str, plan: Plan, x: TensorType) -> TensorType:
    """The output's type in the layout asked for (RuleError if its rank does not fit)."""
    shape = plan.shape  # [B, ...] one size per output group
    wanted = {"image": 4, "tokens": 3}.get(layout)
    if wanted and len(shape) != wanted:
        raise RuleError(f"`as: {layout}` needs a rank-{wanted} output; '{plan.pattern.right.text}' has rank "
                        f"{len(shape)}", field="as", hint="use `as: tensor`, or change the pattern's right side")
    if layout == "tokens":
        grid = plan.kept_grid()
        return TensorType("tokens", shape, x.dtype, grid=grid, origin=grid and origin_of(x, grid))  # [B, N, C]
    if layout == "image":
        return TensorType("image", shape, x.dtype, origin=x.origin)  # [B, C, H, W]
    return TensorType("tensor", shape, x.dtype)  # [B, ...]


def origin_of(x: TensorType, grid: tuple[int, int]) -> GridOrigin:
    """How the output's grid came about: the input's image or grid, cut into patches if smaller."""
    origin = image_origin(x) if x.layout == "image" else grid_origin(x)
    before = x.shape[2:] if x.layout == "image" else x.grid
    patch = tuple(side // g for side, g in zip(before, grid))
    return origin if patch == (1, 1) else origin.then("rearrange", *patch)


def rearranged_grid(p: RearrangeParams, grid):
    """The output's token grid for an input grid (or an image's height and width) `grid`, which
    may be symbolic (TOKEN_GRID: export with a dynamic image size): each output grid axis is
    its given size, or its input side divided by the given sizes of its group's other axes."""
    if grid is None:
        return None
    pattern = parse_pattern(p.pattern)
    left = pattern.left
    spatial = left.groups[2:] if left.rank == 4 else tuple((axis,) for axis in left.groups[1])
    return tuple(p.sizes[group[0]] if group[0] in p.sizes else side // math.prod(p.sizes[a] for a in group[1:])
                 for group, side in zip(spatial, grid))


REARRANGE = register(RearrangeOp())
VALUES.register(REARRANGE, keeps)
READS.register(REARRANGE, ANY)
MOVES_TOKENS = "a rearrange may move values between tokens (it keeps them apart when the token axis is a name of " \
               "its own on both sides, and the length is symbolic)"


def rearrange_decoding(p, types) -> Decode:
    """Tokenwise where the token axis is a name of its own, ungrouped, on both sides (`b l (e f) ->
    b l e f`); else it may move values between tokens (`b (n t) c -> (b n) t c`)."""
    try:
        pattern = parse_pattern(p.pattern)
    except AxesError:
        return Mixes(MOVES_TOKENS)
    left, right = (dimension_names(side) for side in (pattern.left, pattern.right))
    return TOKENWISE if kept_token_axis([left], types, right) else Mixes(MOVES_TOKENS)


def dimension_names(side) -> list[str]:
    """One name per dimension of a pattern's side: an axis alone by its name, a group as written
    (`(e f)`), which no axis name equals."""
    return [group[0] if len(group) == 1 else "(" + " ".join(group) + ")" for group in side.groups]


register_decoding(REARRANGE, ByTypes(rearrange_decoding, MOVES_TOKENS))
