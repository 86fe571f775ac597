"""The named-axes notation of einsum and rearrange, as einops writes it (torch-free):

    b h i d, b h j d -> b h i j          einsum: terms separated by commas, `->` the output
    b (h w) c -> b c h w                 rearrange: parentheses group axes into one dimension
    b c -> b c 1                         `1` is a dimension of size 1 with no axis

A side is a list of dimensions; each dimension is a group of axis names (one name for a plain
axis, several in parentheses, none for `1`). One error type, `AxesError`, with a precise
message and, where there is one, what to write instead (einops' EinopsError is the model).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

ARROW = "->"
AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\d+|\.\.\.|[()]|\S)")
LETTERS = string.ascii_lowercase + string.ascii_uppercase  # torch.einsum's subscripts


class AxesError(Exception):
    """A pattern or an equation that cannot be read, or whose axes do not fit its inputs."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True)
class Side:
    """One side of a pattern, or one term of an equation: a group of axis names per dimension."""

    text: str
    groups: tuple[tuple[str, ...], ...]

    @property
    def axes(self) -> tuple[str, ...]:
        """Every axis name, in order."""
        return tuple(name for group in self.groups for name in group)

    @property
    def rank(self) -> int:
        return len(self.groups)

    @property
    def plain(self) -> bool:
        """Every dimension is one named axis (no parentheses, no 1)."""
        return all(len(group) == 1 for group in self.groups)


@dataclass(frozen=True)
class Pattern:
    """rearrange's `left -> right`."""

    text: str
    left: Side
    right: Side


@dataclass(frozen=True)
class Equation:
    """einsum's `term, term, ... -> output`."""

    text: str
    inputs: tuple[Side, ...]
    output: Side

    def letters(self) -> str:
        """The equation in torch.einsum's single letters: `b h i d, b h j d -> b h i j` is
        `abcd,abed->abce` (letters in order of first appearance)."""
        names = list(dict.fromkeys(a for side in self.inputs + (self.output,) for a in side.axes))
        if len(names) > len(LETTERS):
            raise AxesError(f"'{self.text}' names {len(names)} axes; torch.einsum takes at most {len(LETTERS)}")
        letter = dict(zip(names, LETTERS))
        terms = ["".join(letter[a] for a in side.axes) for side in self.inputs]
        return ",".join(terms) + ARROW + "".join(letter[a] for a in self.output.axes)


def split_arrow(text: str) -> tuple[str, str]:
    """`left -> right`, exactly one arrow."""
    if text.count(ARROW) != 1:
        found = "no" if ARROW not in text else "more than one"
        raise AxesError(f"'{text}' has {found} '->'", hint="write the input axes, '->', then the output axes")
    left, right = text.split(ARROW)
    return left, right


def parse_side(text: str, where: str) -> Side:
    """The dimensions of `text` (one side of a pattern; `where` names it in errors)."""
    groups: list[tuple[str, ...]] = []
    open_group: list[str] | None = None
    for token in TOKEN.findall(text):
        if token == "(":
            if open_group is not None:
                raise AxesError(f"nested parentheses in {where} '{text.strip()}'", hint="group axes one level deep")
            open_group = []
        elif token == ")":
            if open_group is None:
                raise AxesError(f"')' without '(' in {where} '{text.strip()}'")
            if not open_group:
                raise AxesError(f"empty parentheses in {where} '{text.strip()}'", hint="write 1 for a size-1 axis")
            groups.append(tuple(open_group))
            open_group = None
        elif AXIS_NAME.fullmatch(token) and open_group is not None:
            open_group.append(token)
        elif AXIS_NAME.fullmatch(token):
            groups.append((token,))
        else:
            groups.append(_unit(token, text, where, inside=open_group is not None))
    if open_group is not None:
        raise AxesError(f"'(' without ')' in {where} '{text.strip()}'")
    side = Side(text.strip(), tuple(groups))
    if not side.groups:
        raise AxesError(f"{where} is empty", hint="name its axes, e.g. 'b n c'")
    _check_unique(side, where)
    return side


def _unit(token: str, text: str, where: str, inside: bool) -> tuple[str, ...]:
    """The dimension a token that is not a name makes: `1` (no axis), or an error."""
    if token == "...":
        raise AxesError(f"'...' in {where} '{text.strip()}': archspec's patterns name every axis",
                        hint="write the axes out, e.g. 'b n c' for '...'")
    if not token.isdigit():
        raise AxesError(f"unexpected '{token}' in {where} '{text.strip()}'",
                        hint="axes are names (letters, digits, _), grouped with ( ); 1 is a size-1 axis")
    if token != "1":
        raise AxesError(f"a number ({token}) in {where} '{text.strip()}': only 1 may stand for an axis",
                        hint="name the axis and give its size under `sizes`")
    if inside:
        raise AxesError(f"1 inside parentheses in {where} '{text.strip()}'", hint="write 1 on its own")
    return ()


def _check_unique(side: Side, where: str) -> None:
    seen = set()
    for name in side.axes:
        if name in seen:
            raise AxesError(f"axis '{name}' appears twice in {where} '{side.text}'",
                            hint="give each axis its own name")
        seen.add(name)


def parse_pattern(text: str) -> Pattern:
    """rearrange's pattern: the same axes on both sides (only `1`s may be added or removed)."""
    left_text, right_text = split_arrow(text)
    left = parse_side(left_text, "the left side")
    right = parse_side(right_text, "the right side")
    for name in left.axes:
        if name not in right.axes:
            raise AxesError(f"axis '{name}' is on the left of '{text.strip()}' but not on the right",
                            hint="rearrange moves axes without dropping any (a size-1 axis is written 1)")
    for name in right.axes:
        if name not in left.axes:
            raise AxesError(f"axis '{name}' is on the right of '{text.strip()}' but not on the left",
                            hint="rearrange moves axes without creating any (a size-1 axis is written 1)")
    return Pattern(text.strip(), left, right)


def input_terms(text: str) -> list[str]:
    """The input terms of an equation, as written (for counting them before parsing)."""
    return split_arrow(text)[0].split(",")


def parse_equation(text: str) -> Equation:
    """einsum's equation: plain axes in every term; each output axis appears in some input."""
    terms = input_terms(text)
    inputs = tuple(_plain(parse_side(term, f"input {i + 1}"), f"input {i + 1}") for i, term in enumerate(terms))
    output = _plain(parse_side(split_arrow(text)[1], "the output"), "the output")
    for name in output.axes:
        if not any(name in side.axes for side in inputs):
            raise AxesError(f"output axis '{name}' of '{text.strip()}' is in no input",
                            hint="an einsum output axis comes from an input")
    return Equation(text.strip(), inputs, output)


def _plain(side: Side, where: str) -> Side:
    if not side.plain:
        raise AxesError(f"{where} '{side.text}' groups axes or writes 1; einsum axes are plain names",
                        hint="rearrange the input first, or the output afterwards")
    return side
