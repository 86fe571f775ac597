"""The rule kinds of a mapping file, each a small object that turns one state dict into the
next: rename, fuse, split, transpose, reshape and drop (the file format: mapping_file.py).

A rule yields (key, tensor) pairs; `convert` runs the rules in order and notes any name that
two tensors end up sharing. A rule that cannot apply to one tensor (a split whose sizes do not
add up, a fuse of tensors whose shapes differ, a reshape to the wrong size) leaves that tensor
as it is, under its old name, so the loader reports it with the rest of what does not fit.
Patterns are searched (`re.search`) in each key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

Pairs = Iterator[tuple[str, object]]  # (key, tensor)
PART_GROUP = "archspec_part"  # the name of the group `{part}` becomes in a fuse pattern
OWN_SIZES = "*"  # in a reshape: the tensor's own sizes


@dataclass(frozen=True)
class Rename:
    """Each key takes the replacement of the first pattern that it matches (only that match is
    replaced, the rest of the key stays); keys no pattern matches stay as they are."""

    renames: tuple[tuple[re.Pattern, str], ...]

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            yield self.rename(key), value

    def rename(self, key: str) -> str:
        for pattern, replacement in self.renames:
            new, count = pattern.subn(replacement, key, count=1)
            if count:
                return new
        return key


@dataclass(frozen=True)
class Fuse:
    """Tensors whose keys differ only in the part named at `{part}` are concatenated along
    `dim`, in the order of `parts`, into one tensor whose key has `into` there. A group that
    lacks a part, or whose tensors do not concatenate, is left as it is."""

    pattern: re.Pattern  # `{part}` became the group PART_GROUP
    parts: tuple[str, ...]
    into: str
    dim: int = 0

    def apply(self, state: dict) -> Pairs:
        groups: dict[tuple[str, str], dict[str, object]] = {}  # (text before, after the part) -> part -> tensor
        for key, value in state.items():
            found = self.pattern.search(key)
            if found is None or found.group(PART_GROUP) is None:  # (the part may sit in an unused branch)
                yield key, value
                continue
            stem = (key[: found.start(PART_GROUP)], key[found.end(PART_GROUP):])
            groups.setdefault(stem, {})[found.group(PART_GROUP)] = value
        for (head, tail), found in groups.items():
            fused = self.fused(found)
            if fused is None:
                yield from ((head + part + tail, value) for part, value in found.items())
            else:
                yield head + self.into + tail, fused

    def fused(self, found: dict):
        if set(found) != set(self.parts):
            return None
        import torch  # here, so that reading a mapping file does not load torch

        try:
            return torch.cat([found[part] for part in self.parts], dim=self.dim)
        except (RuntimeError, IndexError):
            return None


@dataclass(frozen=True)
class Split:
    """A tensor whose key matches is cut along `dim` into one tensor per `into` name (templates
    that may use the pattern's groups: `\\1`). The cut is by `sizes` (exact lengths) or by
    `shares` (relative lengths: [1, 2] gives a third and two thirds; equal parts by default)."""

    pattern: re.Pattern
    into: tuple[str, ...]
    shares: tuple[int, ...] | None = None
    sizes: tuple[int, ...] | None = None
    dim: int = 0

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            found = self.pattern.search(key)
            pieces = self.pieces(value) if found else None
            if pieces is None:
                yield key, value
            else:
                yield from zip((found.expand(name) for name in self.into), pieces)

    def pieces(self, value) -> tuple | None:
        try:
            length = value.shape[self.dim]
        except IndexError:
            return None
        sizes = self.sizes_for(length)
        return None if sizes is None else value.split(list(sizes), dim=self.dim)

    def sizes_for(self, length: int) -> tuple[int, ...] | None:
        if self.sizes is not None:
            return self.sizes if sum(self.sizes) == length else None
        shares = self.shares or (1,) * len(self.into)
        unit, rest = divmod(length, sum(shares))
        return None if rest else tuple(share * unit for share in shares)


@dataclass(frozen=True)
class Transpose:
    """2-D tensors whose key matches a pattern are transposed ([in, out] -> [out, in], as
    GPT-2's Conv1D stores what a Linear holds the other way round); others stay."""

    patterns: tuple[re.Pattern, ...]

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            if value.dim() == 2 and any(p.search(key) for p in self.patterns):
                yield key, value.t()
            else:
                yield key, value


@dataclass(frozen=True)
class Reshape:
    """A tensor whose key matches takes `shape`: sizes, at most one -1 (the size that makes the
    count right), or one "*" (the tensor's own sizes, in order). A class token kept as a vector
    [C] takes [1, 1, "*"] -> [1, 1, C]; a table [N, C] takes [1, "*"] -> [1, N, C]. A tensor
    that cannot take the shape stays as it is."""

    pattern: re.Pattern
    shape: tuple[int | str, ...]

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            yield key, self.reshaped(value) if self.pattern.search(key) else value

    def reshaped(self, value):
        shape = []
        for size in self.shape:
            shape.extend(value.shape if size == OWN_SIZES else [size])
        try:
            return value.reshape(shape)
        except RuntimeError:
            return value


@dataclass(frozen=True)
class Drop:
    """Tensors whose key matches a pattern are left out (buffers the model rebuilds)."""

    patterns: tuple[re.Pattern, ...]

    def apply(self, state: dict) -> Pairs:
        for key, value in state.items():
            if not any(p.search(key) for p in self.patterns):
                yield key, value


Rule = Rename | Fuse | Split | Transpose | Reshape | Drop


@dataclass
class Converted:
    """A state dict after the rules, and the names that two tensors ended up sharing."""

    state: dict
    clashes: list[str] = field(default_factory=list)


def convert(state: dict, rules: tuple[Rule, ...]) -> Converted:
    result = Converted(dict(state))
    for rule in rules:
        out: dict = {}
        for key, value in rule.apply(result.state):
            if key in out and key not in result.clashes:
                result.clashes.append(key)
            out[key] = value
        result.state = out
    return result
