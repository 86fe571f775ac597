"""What a failed rule proposes, as data: which parameter, what its value must satisfy and which
values would, whether the input size bears on the problem (and how the grid came about), and what
to say about the input size. The hint users read is rendered from it in one place
(`Suggestion.text`, called when a Diagnostic is made); the whole-spec solver (pipeline.py) reads
and refines the structure, never the text.

    Suggestion(field="window", advice=Divides("window", 56, shown=(7, 8, 14, 28), candidates=...),
               grid=GridOrigin((224, 224), (GridStep("patch", (4,)),)), input=NearestInput(224))
    -> "use a window that divides 56 (7, 8, 14, 28) or an input of 224"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

# -- how a grid came about -------------------------------------------------------------------


@dataclass(frozen=True)
class GridStep:
    """One step from an image towards a token grid: `patch 4`, `merge 2`, `conv 7/4`."""

    name: str
    sizes: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name} {'/'.join(map(str, self.sizes))}"


@dataclass(frozen=True)
class GridOrigin:
    """The image (height, width) a grid was cut from, when known, and the steps since."""

    image: tuple[int, int] | None = None
    steps: tuple[GridStep, ...] = ()

    def then(self, name: str, *sizes: int) -> GridOrigin:
        return GridOrigin(self.image, self.steps + (GridStep(name, sizes),))

    @property
    def square_image(self) -> int | None:
        """The side of the image when it is square, else None."""
        return self.image[0] if self.image is not None and self.image[0] == self.image[1] else None

    def __str__(self) -> str:
        """'image 240 / patch 4 / merge 2'."""
        parts = [str(step) for step in self.steps]
        if self.image is not None:
            h, w = self.image
            parts.insert(0, f"image {h}" if h == w else f"image {h}x{w}")
        return " / ".join(parts)


# -- what to do about the parameter ----------------------------------------------------------


def _listed(values) -> str:
    return ", ".join(map(str, values))


@dataclass(frozen=True)
class Divides:
    """The parameter (a `noun`: window, patch, ratio, number of heads) must divide `whole`
    (None: both sides of the grid). `shown`: the values the rule lists; `candidates`: the values
    a whole-spec solver may try. `passing`: set by the solver, the values with which the whole
    spec passes (empty: none does)."""

    noun: str
    whole: int | None
    shown: tuple[int, ...]
    candidates: tuple[int, ...]
    passing: tuple[int, ...] | None = None
    otherwise: Setting | None = None  # another way out, on the same node (kept if the solver confirms it)
    reshapes_weights: bool = False  # a new value changes the node's weight shapes: the input size comes first

    def text(self) -> str:
        return self.divides() + self.weights_note() + self.or_otherwise()

    def with_sizes(self, sizes: str) -> str:
        if self.passing == () or (self.passing is None and not self.shown):  # the size is the way out
            return f"use {sizes}: {self.divides()}{self.or_otherwise()}"
        if self.reshapes_weights:
            return f"use {sizes}; or {self.divides()}{self.weights_note()}{self.or_otherwise()}"
        return f"{self.divides()} or {sizes}{self.or_otherwise()}"

    def weights_note(self) -> str:
        return f" (another {self.noun} changes the weights' shapes)" if self.reshapes_weights else ""

    def divides(self) -> str:
        whole = "the grid" if self.whole is None else str(self.whole)
        if self.passing is None and not self.shown:  # a prime: only 1 and itself divide it
            return f"no {self.noun} but 1 and {whole} itself divides {whole}"
        if self.passing is None:
            return f"use a {self.noun} that divides {whole} ({_listed(self.shown)})"
        if not self.passing:
            return f"no {self.noun} that divides {whole} passes the whole spec"
        return f"use a {self.noun} that divides {whole} and passes the whole spec ({_listed(self.passing)})"

    def or_otherwise(self) -> str:
        return f"; or {self.otherwise.text()}" if self.otherwise else ""


@dataclass(frozen=True)
class Setting:
    """A field of the same node set to a value, as another way out ('set pad: true to pad the
    grid ...'); the whole-spec solver tries it and keeps it only when the spec then passes there."""

    field: str
    value: bool | int | str
    does: str  # 'to pad the grid to a multiple of 7 ...'

    def text(self) -> str:
        shown = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return f"set {self.field}: {shown} {self.does}"


@dataclass(frozen=True)
class Remedy:
    """Something to do, in words ('use a pool of at most 8'); an input size is another way out."""

    words: str

    def text(self) -> str:
        return self.words

    def with_sizes(self, sizes: str) -> str:
        return f"{self.words} or {sizes}"


@dataclass(frozen=True)
class Note:
    """An explanation ('each mask cell must cover a whole number of pixels')."""

    words: str

    def text(self) -> str:
        return self.words

    def with_sizes(self, sizes: str) -> str:
        return f"{self.words} ({sizes} would pass)"


@dataclass(frozen=True)
class SizeRemedy:
    """A remedy that is about the input size alone: sizes found replace it."""

    words: str

    def text(self) -> str:
        return self.words

    def with_sizes(self, sizes: str) -> str:
        return f"use {sizes}"


Advice = Union[Divides, Remedy, Note, SizeRemedy]

# -- what to say about the input size --------------------------------------------------------


@dataclass(frozen=True)
class NearestInput:
    """The rule's own guess: the nearest square input at which its grid fits."""

    size: int

    def text(self) -> str:
        return f"an input of {self.size}"


@dataclass(frozen=True)
class InputMultiple:
    """The rule's own guess: an input whose sides are multiples of `multiple`."""

    multiple: int

    def text(self) -> str:
        return f"an input that is a multiple of {self.multiple}"


@dataclass(frozen=True)
class CheckedSizes:
    """Input sizes at which the whole spec was checked and the problem is gone."""

    sizes: tuple[int, ...]

    def text(self) -> str:
        return f"an input of {' or '.join(map(str, self.sizes))}"


InputAdvice = Union[NearestInput, InputMultiple, CheckedSizes]

# -- the suggestion --------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    """`field`: the parameter to change (None: the node's inputs). `grid`: set when the input
    size bears on the problem, with how the grid came about. `input`: what the hint says about
    the input size (the rule's guess, or sizes the solver checked)."""

    field: str | None = None
    advice: Advice | None = None
    grid: GridOrigin | None = None
    input: InputAdvice | None = None

    @property
    def size_matters(self) -> bool:
        return self.grid is not None

    def text(self) -> str | None:
        """The hint, in words (None when there is nothing to say)."""
        if isinstance(self.input, CheckedSizes):
            sizes = self.input.text()
            return self.advice.with_sizes(sizes) if self.advice is not None else f"use {sizes}"
        advice = self.advice.text() if self.advice is not None else None
        if self.input is None:
            return advice
        if not advice:
            return f"use {self.input.text()}"
        if getattr(self.advice, "reshapes_weights", False):
            return f"use {self.input.text()}; or {advice}"
        return f"{advice} or {self.input.text()}"


__all__ = ["GridStep", "GridOrigin", "Divides", "Remedy", "Note", "SizeRemedy", "Advice", "NearestInput",
           "InputMultiple", "CheckedSizes", "InputAdvice", "Suggestion"]
