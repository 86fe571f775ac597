"""What calling a built model checks of its inputs, before anything runs: each input's rank and
every dim but the batch against the spec's declaration (`InputShape`, one per input, made at
lowering by model.input_shapes), and that inputs sharing a dim agree on its size. A ValueError
names the input, what the spec declares and where.

It needs only torch: the built module (model.py's ArchspecModel) and a build's standalone
model.py (compiler/backends/source.py copies this file's code in verbatim) check alike, so a
model.py given an image of another size refuses it rather than running it scrambled (the
SegFormer trial: a 64x16 image has a 32x32 image's token count).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class InputShape:
    """What the spec declares for one input: `checks` holds (dim index, lowest, highest) for
    every dim but the batch (a fixed size has lowest == highest, a symbolic dim its range),
    `symbols` the dims' names by index (symbolic dims only), `declared` the shape in words
    ([B, L]) and `where` the declaration's file:line."""

    name: str
    rank: int
    checks: tuple[tuple[int, int, int], ...]
    symbols: dict
    declared: str
    where: str
    sequence: bool  # dim 1 counts tokens (ids, tokens)
    ids: bool = False  # token ids [B, L] (int64), what generate feeds
    batched: bool = False  # dim 0 is the batch B, which every such input shares
    vocab: int | None = None  # ids: the fewest rows of the embeds that read them (an id at or past it fails)

    def check(self, x) -> None:
        shape = getattr(x, "shape", None)
        if shape is None:
            return
        if len(shape) != self.rank:
            raise ValueError(self.refusal(f"is {_shape_words(shape)}", f"[{self.declared}]"))
        if self.ids and isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            raise ValueError(self.refusal(f"holds {str(x.dtype).removeprefix('torch.')} values",
                                          f"token ids (int64: `.long()` turns them so)"))
        for index, lo, hi in self.checks:
            size = shape[index]
            if type(size) is not int:  # symbolic (a tracer's): the program's own guards hold
                return
            if not lo <= size <= hi:
                raise ValueError(self.wrong_size(shape, index, size, lo, hi))

    def wrong_size(self, shape, index: int, size: int, lo: int, hi: int) -> str:
        name = self.symbols.get(index)
        if name is None:
            return self.refusal(f"is {_shape_words(shape)}", f"[{self.declared}]")
        has = f"{size} tokens" if self.sequence and index == 1 else f"size {size} in dim {index}"
        return self.refusal(f"has {has}", f"{name} in {lo}..{hi}")

    def refusal(self, got: str, declared: str) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"input '{self.name}' {got}; the spec declares {declared}{where}"


def _shape_words(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def inputs_in_order(shapes, args, kwargs) -> tuple:
    """The inputs given, in the spec's order (`shapes`), those given by name too (Hugging Face's
    `model(input_ids=..., attention_mask=...)`: the Pegasus trial's 70-token source by name was
    not checked, and met a torch error deep in the model); as far as they come one after another."""
    if not kwargs:
        return args
    given = list(args)
    for declared in tuple(shapes)[len(args):]:
        if declared.name not in kwargs:
            break
        given.append(kwargs[declared.name])
    return tuple(given)


def check_input_shapes(shapes, args) -> None:
    """ValueError for an input outside the shape its spec declares (InputShape.check), or two
    inputs that give one of its dims (L) two sizes (the Longformer trial's 8 ids and a mask of 9
    met as a torch error deep in the model)."""
    sizes: dict[str, tuple[int, str]] = {}  # a dim's name -> (its size, the input that gave it)
    for declared, x in zip(shapes, args):
        declared.check(x)
        symbols = {0: "B"} | declared.symbols if declared.batched else declared.symbols
        for index, name in symbols.items():
            size = x.shape[index] if isinstance(x, torch.Tensor) and x.dim() > index else None
            if type(size) is not int:
                continue
            first = sizes.setdefault(name, (size, declared.name))
            if first[0] != size:
                where = f" ({declared.where})" if declared.where else ""
                raise ValueError(f"input '{declared.name}' has {name} = {size}, and input '{first[1]}' has "
                                 f"{name} = {first[0]}: inputs that share {name} must agree{where}")
