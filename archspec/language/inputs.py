"""The spec's `dims` (symbolic sizes with ranges) and `inputs` (typed model inputs)."""

from __future__ import annotations

from typing import Any

from ..core.errors import Collector, SpecError, error
from ..core.types import BATCH, Sym, TensorType, grid_mask, grid_tokens, ids, image, labels, tensor, tokens, vector
from ..primitives.base import MAX_SIZE
from .expressions import ExprError, evaluate
from .loader import Document
from .schema import SpecDoc
from .values import Env, Params


def symbolic_dims(spec: SpecDoc, doc: Document, params: Params, errors: Collector) -> dict[str, Sym]:
    dims = {"B": BATCH}
    for name, raw in spec.dims.items():
        loc = doc.loc(("dims", name))
        try:
            bounds = [_bound(value, doc, ("dims", name, i), params) for i, value in enumerate(raw)]
        except SpecError as exc:
            errors.add(exc)
            continue
        if name == "B":
            errors.add(error("`B` is the batch and is always symbolic; declare other dims", loc))
        elif name in spec.params:
            errors.add(error(f"dim '{name}' has the name of a param", loc, hint="rename one of them"))
        elif len(bounds) != 2 or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds) \
                or not 1 <= bounds[0] <= bounds[1] <= MAX_SIZE:
            errors.add(error(f"dim '{name}' needs a range [min, max] with 1 <= min <= max <= {MAX_SIZE:,}", loc))
        else:
            dims[name] = Sym(name, bounds[0], bounds[1])
    return dims


def _bound(value: Any, doc: Document, path: tuple, params: Params) -> Any:
    """A dim's bound: a number, or an expression over params (a bare name is one too)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("${") and text.endswith("}"):
        text = text[2:-1]
    env = Env(params)
    try:
        return evaluate(text, env.lookup, env.names)
    except ExprError as exc:
        raise error(exc.message, doc.loc(path), hint=exc.hint) from None


class InputTypes:
    """The tensor type of each declared input."""

    def __init__(self, spec: SpecDoc, doc: Document, params: Params, dims: dict[str, Sym]):
        self.spec, self.doc, self.params, self.dims = spec, doc, params, dims

    def of(self, name: str, section: str = "inputs") -> TensorType:
        decl = getattr(self.spec, section)[name]
        base = (section, name)
        shape_raw = decl if isinstance(decl, list) else decl.shape
        shape_path = base if isinstance(decl, list) else base + ("shape",)
        dtype = "float32" if isinstance(decl, list) else decl.dtype
        shape = [self.dim(v, shape_path + (i,)) for i, v in enumerate(shape_raw)]
        loc = self.doc.loc(shape_path)
        if not shape or shape[0] is not BATCH:
            raise error(f"input '{name}' must start with the batch dim B", self.doc.loc(shape_path + (0,)),
                        hint=f"e.g. [B, {', '.join(str(d) for d in shape[1:]) or '3, 224, 224'}]")
        rank = len(shape)
        grid = None if isinstance(decl, list) or decl.grid is None else \
            [self.dim(v, base + ("grid", i)) for i, v in enumerate(decl.grid)]  # numbers, or ${...} as shape's
        if dtype == "int64":
            return self.integer(name, shape, loc)
        if rank == 4:
            if any(isinstance(d, Sym) for d in shape[1:]):
                raise error("an image's channels and size must be fixed numbers", loc,
                            hint="check other sizes with --set (e.g. --set img=256)")
            return image(*shape[1:])
        if grid is not None and any(isinstance(side, Sym) for side in grid):
            raise error("a token grid's sides are fixed numbers", self.doc.loc(base + ("grid",)),
                        hint="give numbers or expressions over params; check other sizes with --set")
        if rank == 3:
            if grid is None and isinstance(shape[2], Sym):  # channels that change with the input: no tokens
                return tensor(tuple(shape))  # [B, C, S]: a signal channels first, moved by a rearrange
            if grid is None:
                return tokens(shape[1], shape[2])
            if len(grid) != 2 or grid[0] * grid[1] != shape[1]:
                raise error(f"grid {grid} does not hold {shape[1]} tokens", self.doc.loc(base + ("grid",)))
            return grid_tokens(tuple(grid), shape[2])
        if rank == 2:
            return vector(shape[1])
        if rank == 5:
            return self.video(shape, loc)
        raise error(f"input '{name}' has rank {rank}; inputs are videos [B,T,C,H,W], images [B,C,H,W], tokens "
                    "[B,N,C], ids [B,L] (dtype int64) or vectors [B,C]", loc)

    def video(self, shape: list, loc) -> TensorType:
        """A float input of rank 5, a video [B, T, C, H, W]: a `tensor` whose frames a rearrange folds
        into the batch ('b t c h w -> (b t) c h w', `as: image`) for the image primitives."""
        if any(isinstance(d, Sym) for d in shape[1:]):
            raise error("a video's frames, channels and size must be fixed numbers", loc,
                        hint="check other sizes with --set (e.g. --set frames=16)")
        return tensor(tuple(shape))  # [B, T, C, H, W]

    def integer(self, name: str, shape: list, loc) -> TensorType:
        """An int64 input: labels [B], token ids (or a sequence mask) [B, L], a grid mask [B, H, W]."""
        if len(shape) == 1:
            return labels()
        if len(shape) == 2:
            return ids(shape[1])
        if len(shape) == 3 and not any(isinstance(d, Sym) for d in shape[1:]):
            return grid_mask((shape[1], shape[2]))
        if len(shape) in (3, 4):  # per-token integers (LayoutLMv3's boxes [B, L, 4]): a tensor, sliced or gathered
            return tensor(tuple(shape), "int64")
        raise error(f"integer input '{name}' must be labels [B], token ids [B, L], a grid mask [B, H, W] (with "
                    "fixed H and W) or a tensor of rank 3 or 4 (per-token integers, [B, L, 4] boxes)", loc)

    def dim(self, value: Any, path: tuple):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("${") and text.endswith("}"):
                text = text[2:-1]
            if text in self.dims:
                return self.dims[text]
            env = Env(self.params)
            try:
                value = evaluate(text, env.lookup, env.names)
            except ExprError as exc:
                hint = exc.hint or "sizes are numbers, B, a dim declared under `dims`, or an expression over params"
                if exc.message == f"unknown name '{text}'" and text.isidentifier():  # a length never declared
                    declared = f"a symbolic size is declared under `dims` ({text}: [1, 512]: its least and most)"
                    hint = f"{hint}; or {declared}" if str(hint).startswith("did you mean") else declared
                raise error(exc.message, self.doc.loc(path), hint=hint) from None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise error(f"a size must be a positive integer, got {value!r}", self.doc.loc(path))
        if value > MAX_SIZE:
            raise error(f"a size of {value} is beyond archspec's limit of {MAX_SIZE:,}", self.doc.loc(path))
        return value
