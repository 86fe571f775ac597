"""Tensor types that flow along the edges of the IR: a shape plus a layout.

Layouts:
- image   [B, C, H, W]
- tokens  [B, N, C], optionally a grid (H, W) with N = prefix + H*W (prefix = class tokens)
- ids     [B, L] integer token ids (or a 0/1 mask over a sequence)
- mask    [B, H, W] integer 0/1 mask over a grid (1 = masked), e.g. SimMIM's patch mask
- labels  [B] integer class labels (a training target)
- vector  [B, C] (pooled features, class logits)
- matrix  [B, B] (contrastive logits: images x texts)
- scalar  [] (a loss)
- tensor  [B, d1, d2, ...] any rank, batch first: what the tensor ops (einsum, rearrange,
          reductions, ...) give unless told a layout; `dtype` says float or int64 (indices)

`B` is the symbolic batch; a learned parameter has 1 there (it broadcasts). `B*k` is the batch with
axes of k elements in all folded into it (a rearrange's `b t c h w -> (b t) c h w`): k rows a
sample. Sequence lengths may be symbolic too (a `Sym` with a range).
`origin` remembers how a grid came about (image 224, patch 4, merge 2: a GridOrigin) so that
errors can explain a grid size and hints can name an input size that fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from .suggestions import GridOrigin


@dataclass(frozen=True)
class Sym:
    """A symbolic dimension with the range of sizes it may take."""

    name: str
    lo: int
    hi: int

    def __str__(self) -> str:
        return self.name


BATCH = Sym("B", 1, 1024)


@dataclass(frozen=True)
class FoldedBatch(Sym):
    """The batch with other axes folded into it (`b t c h w -> (b t) c h w`): B x `factor` rows,
    still symbolic, so that a program exported with a dynamic batch stays dynamic."""

    factor: int = 1
    # the sizes of the axes folded in, outermost first (product: factor), where a rearrange folded
    # them: an unfold must split the rows along the same boundaries; () where unknown
    parts: tuple[int, ...] = field(default=(), compare=False)
    names: tuple[str, ...] = field(default=(), compare=False)  # the folding rearrange's names for them


def batch_times(factor: int, parts: tuple[int, ...] = (), names: tuple[str, ...] = ()) -> Sym:
    """The batch with `factor` rows per sample (`parts`: the sizes of the axes folded in, outermost
    first, and `names` what the rearrange that folded them called them, where known): B itself for
    1, else B*factor."""
    if factor == 1:
        return BATCH
    return FoldedBatch(f"B*{factor}", factor, BATCH.hi * factor, factor, parts, names if len(names) == len(parts) else ())


def folded_parts(d) -> tuple[int, ...]:
    """The sizes of the axes folded into a batch dimension, outermost first; () where unknown."""
    return d.parts if isinstance(d, FoldedBatch) else ()


def folded_names(d) -> tuple[str, ...]:
    """The names the folding rearrange gave the axes folded into a batch dimension; () where unknown."""
    return d.names if isinstance(d, FoldedBatch) else ()


def batch_factor(d) -> int | None:
    """How many rows per sample a batch dimension holds (1 for B, k for B*k); None for a size
    that is no batch (a number, a declared dim)."""
    if isinstance(d, FoldedBatch):
        return d.factor
    return 1 if d == BATCH else None

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8}


@dataclass(frozen=True)
class TensorType:
    layout: str
    shape: tuple
    dtype: str = "float32"
    grid: tuple[int, int] | None = None
    prefix: int = 0
    origin: GridOrigin | None = field(default=None, compare=False)

    # -- accessors ---------------------------------------------------------------------
    @property
    def channels(self) -> int:
        """C of an image, tokens or vector."""
        return self.shape[1] if self.layout == "image" else self.shape[-1]

    @property
    def length(self):
        """N of tokens, L of ids."""
        return self.shape[1]

    def describe(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        text = f"[{dims}]"
        if self.grid:
            text += f" {self.grid[0]}x{self.grid[1]}"
            if self.prefix:
                text += f"+{self.prefix}"
        if self.dtype != "float32":
            text += f" {self.dtype}"
        return text

    def layout_name(self) -> str:
        if self.layout == "tokens" and self.grid:
            return f"a {self.grid[0]}x{self.grid[1]} token grid"
        if self.layout == "tensor":
            return f"a rank-{len(self.shape)} tensor"
        return {"image": "an image", "tokens": "a token sequence", "ids": "token ids",
                "vector": "a feature vector", "matrix": "a logit matrix", "mask": "a grid mask",
                "labels": "class labels", "scalar": "a scalar"}[self.layout]

    def max_numel(self) -> int:
        """Elements per sample (batch 1; k rows of a batch B*k), symbolic dims at their largest."""
        rows = (batch_factor(self.shape[0]) or 1) if self.shape else 1
        return rows * self.row_numel()

    def row_numel(self) -> int:
        """Elements per row of the batch (a row of B*k is 1/k of a sample), symbolic dims at
        their largest: what an op's cost rule counts, the costing scaling it by the rows a sample
        has (primitives/cost.py)."""
        total = 1
        for d in self.shape[1:]:
            total *= d.hi if isinstance(d, Sym) else d
        return total

    def nbytes(self) -> int:
        return self.max_numel() * DTYPE_BYTES[self.dtype]


def image(channels: int, height: int, width: int, origin: GridOrigin | None = None) -> TensorType:
    return TensorType("image", (BATCH, channels, height, width), origin=origin)


def tokens(length, channels: int, grid=None, prefix: int = 0, origin: GridOrigin | None = None) -> TensorType:
    return TensorType("tokens", (BATCH, length, channels), grid=grid, prefix=prefix, origin=origin)


def grid_tokens(grid: tuple[int, int], channels: int, prefix: int = 0, origin: GridOrigin | None = None) -> TensorType:
    return tokens(prefix + grid[0] * grid[1], channels, grid, prefix, origin)


def ids(length) -> TensorType:
    return TensorType("ids", (BATCH, length), dtype="int64")


def grid_mask(grid: tuple[int, int]) -> TensorType:
    return TensorType("mask", (BATCH, grid[0], grid[1]), dtype="int64", grid=tuple(grid))


def labels() -> TensorType:
    return TensorType("labels", (BATCH,), dtype="int64")


def scalar() -> TensorType:
    return TensorType("scalar", ())


def vector(channels: int) -> TensorType:
    return TensorType("vector", (BATCH, channels))


def matrix() -> TensorType:
    return TensorType("matrix", (BATCH, BATCH))


def tensor(shape: tuple, dtype: str = "float32") -> TensorType:
    """A tensor of any rank, batch first ([B, d1, ...]; a constant or a parameter has 1 there)."""
    return TensorType("tensor", tuple(shape), dtype)


def with_channels(t: TensorType, channels: int) -> TensorType:
    """The same layout with another width (an MLP or projection output)."""
    return replace(t, shape=t.shape[:-1] + (channels,))


def sequence_shaped(shape: tuple, dtype: str) -> bool:
    """int64 [B, N]: what is ids, a sequence mask, wherever it is made (a cast, a compare, a concat)."""
    return dtype == "int64" and len(shape) == 2 and shape[0] is BATCH


def summed(sizes) -> "int | Sym":
    """The sum of sizes of which some may be symbolic: a Sym named by its parts and a whole number
    last (`L+17`), bounded by theirs (image tokens before a text of any length: GIT, ViLT)."""
    fixed = sum(s for s in sizes if not isinstance(s, Sym))
    symbolic = [s for s in sizes if isinstance(s, Sym)]
    if not symbolic:
        return fixed
    if len(symbolic) == 1:
        return shifted(symbolic[0], fixed)
    parts = [offset_of(s) for s in symbolic]
    joined = Sym("+".join(base for base, _ in parts), sum(s.lo for s in symbolic), sum(s.hi for s in symbolic))
    return shifted(joined, fixed)


_OFFSET = re.compile(r"^(.*[^-+*/(])([+-]\d+)$")


def offset_of(size: Sym) -> tuple[str, int]:
    """('L', 17) for `L+17`, ('(S-10)//5', 1) for `(S-10)//5+1`, (name, 0) for a plain name."""
    found = _OFFSET.match(size.name)
    return (found.group(1), int(found.group(2))) if found else (size.name, 0)


def shifted(size, delta: int):
    """size + delta, where the size may be symbolic: `L+17` shifted by -17 is `L` again, so a
    slice of the text after 17 image tokens has the text's own length."""
    if not isinstance(size, Sym):
        return size + delta
    if delta == 0:
        return size
    base, offset = offset_of(size)
    total = offset + delta
    return Sym(base if total == 0 else f"{base}{total:+d}", size.lo + delta, size.hi + delta)


def dim_value(d) -> int:
    """A concrete size for costing: the largest a symbolic dim may be."""
    return d.hi if isinstance(d, Sym) else d
