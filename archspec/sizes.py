"""Which square input sizes a spec accepts, and which values of a param pass the whole spec.

The shape rules are the truth about sizes (patchify's divisibility, Swin's even merges, window
and sr-ratio divisibility, PVT's convolution grids, pools that must fit), and they are spread
over every op, including ops added later and plugins. So the solver does not restate them:
it re-checks candidate sizes, cheaply.

- The spec is expanded once at its own size and once at another; when the two IRs agree on
  every node (the size reaches only the inputs, as in every shipped spec), a candidate size
  costs one shape-inference pass over that IR with the inputs retyped (about 0.1-0.5 ms, far
  less when a rule near the input fails). Otherwise each candidate is expanded anew.
- Every size the solver returns is then checked by the whole pipeline (expand, infer, cost)
  at that size, so a suggestion never fails `archspec check`.

"The size" is the height and width of a square image input, written either as one param
(`image: [B, 3, img, img]`, so `--set img=N` changes it) or as a number.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from math import gcd
from typing import Any, Iterable

from .core.errors import Collector, Diagnostic, SpecError
from .core.ir import Graph
from .language.compose import apply_overrides
from .language.expand import expand, validate
from .language.inputs import InputTypes, symbolic_dims
from .language.loader import Document
from .language.values import Params
from .primitives.cost import cost
from .primitives.infer import ShapeInference, infer

Problems = frozenset  # of (loc, path, message): what a check finds, comparable across sizes
PASSES: Problems = frozenset()


def hint_seconds(default: float) -> float:
    """The time a hint may spend searching: `default`, or ARCHSPEC_HINT_SECONDS when it holds a
    positive number (the test suite raises it, so that a hint does not depend on how busy the
    machine is)."""
    try:
        seconds = float(os.environ.get("ARCHSPEC_HINT_SECONDS", default))
    except ValueError:
        return default
    return seconds if 0 < seconds < float("inf") else default


SEARCH_SECONDS = hint_seconds(0.2)  # the time a hint may spend looking for sizes
PROGRESS_SECONDS = 5.0  # a long `--sizes` says how far it got this often
FARTHEST = 4096  # sizes are searched up to this far from the given one
LARGEST_SIZE = 16384  # the largest size `sizes()` lists


@dataclass(frozen=True)
class SizeKnob:
    """What sets a spec's square image size: `param` (e.g. img) or, when None, the literal
    height and width of the input `input`. `size` is the spec's own size."""

    input: str
    param: str | None
    size: int

    def describe(self) -> str:
        return f"--set {self.param}=N" if self.param else f"the size of input '{self.input}'"


def problems_of(exc: SpecError) -> Problems:
    return frozenset((d.loc, d.path, d.message) for d in exc.diagnostics if d.severity == "error")


def key_of(diagnostic: Diagnostic) -> tuple:
    return (diagnostic.loc, diagnostic.path, diagnostic.message)


# -- the knob ------------------------------------------------------------------------------
def _bare_name(value: Any) -> str | None:
    """'img' for `img` or `${img}`; None for anything else."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.startswith("${") and text.endswith("}"):
        text = text[2:-1].strip()
    return text if text.isidentifier() else None


def _shape_of(decl: Any) -> list | None:
    if isinstance(decl, list):
        return decl
    if isinstance(decl, dict) and decl.get("dtype", "float32") == "float32" and isinstance(decl.get("shape"), list):
        return decl["shape"]
    return None


def find_knob(doc: Document, graph: Graph | None = None) -> SizeKnob | None:
    """The knob of the first square image input (a composed document), or None. The size is
    read from `graph` (the spec expanded) when given, else from the param or literal."""
    data = doc.data if isinstance(doc.data, dict) else {}
    params = data.get("params") if isinstance(data.get("params"), dict) else {}
    inputs = data.get("inputs") if isinstance(data.get("inputs"), dict) else {}
    for name, decl in inputs.items():
        shape = _shape_of(decl)
        if not shape or len(shape) != 4 or shape[2] != shape[3]:
            continue
        height = shape[2]
        param = _bare_name(height)
        if param is not None and param not in params:
            continue  # a symbolic dim: images have fixed sizes, the check says so
        size = _size_in(graph, name) if graph is not None else (params[param] if param else height)
        if isinstance(size, bool) or not isinstance(size, int):
            continue
        return SizeKnob(name, param, size)
    return None


def no_knob(doc: Document, spec: str, option: str) -> str:
    """Why `option` (--size, --sizes) finds no square image input in the spec, in words: an image
    input whose sides are written apart ([B, 3, img_h, img_w] with both ${img}: the MLCD and
    EfficientFormerV2 trials were told it had no square input) is named with the fix."""
    data = doc.data if isinstance(doc.data, dict) else {}
    inputs = data.get("inputs") if isinstance(data.get("inputs"), dict) else {}
    for name, decl in inputs.items():
        shape = _shape_of(decl)
        if shape and len(shape) == 4 and shape[2] != shape[3]:
            return (f"{option}: the image input '{name}' of {spec} is [{', '.join(map(str, shape))}]: its height and "
                    f"width are written apart, and {option} varies one size for both sides: write them as one "
                    f"param (e.g. [{shape[0]}, {shape[1]}, img, img])")
    return f"{option}: {spec} has no square image input [B, C, N, N] whose size is a number or a param"


def _size_in(graph: Graph, name: str):
    if name not in graph:
        return None
    t = graph.type_of(name) if "type" in graph.meta(name) else None
    return t.shape[2] if t is not None and t.layout == "image" else None


def with_size(doc: Document, knob: SizeKnob, size: int) -> Document:
    """The document with the image `size` x `size`."""
    if knob.param is not None:
        return apply_overrides(doc, {knob.param: size})
    data = dict(doc.data)
    inputs = dict(data["inputs"])
    decl = inputs[knob.input]
    if isinstance(decl, list):
        inputs[knob.input] = decl[:2] + [size, size]
    else:
        inputs[knob.input] = {**decl, "shape": decl["shape"][:2] + [size, size]}
    data["inputs"] = inputs
    return Document(doc.file, data, doc.locs, doc.key_locs, doc.quoted, doc.sources)


# -- checking a variant --------------------------------------------------------------------
def check_problems(doc: Document, costed: bool = False) -> Problems:
    """What the checker finds in `doc` (already composed): PASSES when nothing."""
    try:
        graph = infer(expand(doc))
        if costed:
            cost(graph)
    except SpecError as exc:
        return problems_of(exc)
    except Exception as exc:  # noqa: BLE001 - a rule that breaks at an odd size: that size does not pass
        return frozenset({(None, None, f"the checker failed: {exc!r}")})
    return PASSES


def _signature(graph: Graph) -> list:
    """What the IR computes, inputs' types aside: nodes, their params and edges, outputs."""
    nodes = [(n.name, n.op, n.params, n.inputs) for n in graph.nodes() if not n.is_input]
    return [nodes, [(o.name, o.node) for o in graph.outputs], sorted(graph.groups.items())]


def _input_types(doc: Document) -> dict:
    """name -> TensorType of every input and target of `doc`, as expand would type them."""
    spec = validate(doc)
    params = Params(spec.params, doc)
    errors = Collector()
    types = InputTypes(spec, doc, params, symbolic_dims(spec, doc, params, errors))
    errors.raise_if_any()
    result = {name: types.of(name) for name in spec.inputs}
    result.update({name: types.of(name, "targets") for name in spec.targets})
    return result


class SizeSolver:
    """Checks a spec at other square input sizes (see the module doc)."""

    def __init__(self, doc: Document, knob: SizeKnob):
        self.doc, self.knob = doc, knob
        self.cache: dict[int, Problems] = {}
        self.verified: dict[int, Problems] = {}
        self.graph = self._size_blind_graph()

    def _size_blind_graph(self) -> Graph | None:
        """The IR at the spec's own size when the size reaches only the inputs, else None."""
        try:
            here = expand(with_size(self.doc, self.knob, self.knob.size))
            other = expand(with_size(self.doc, self.knob, 2 * self.knob.size + 32))
        except SpecError:
            return None
        if _signature(here) != _signature(other) or {n.name for n in here.inputs()} != {
                n.name for n in other.inputs()}:
            return None
        self.names = [n.name for n in here.nodes()]
        return here

    # -- one size ----------------------------------------------------------------------
    def problems(self, size: int) -> Problems:
        """What a check at `size` finds (shapes only); cached."""
        if size not in self.cache:
            self.cache[size] = self._retyped(size) if self.graph is not None else \
                check_problems(with_size(self.doc, self.knob, size))
        return self.cache[size]

    def verify(self, size: int) -> Problems:
        """What the whole pipeline (expand, infer, cost) finds at `size`."""
        if size not in self.verified:
            self.verified[size] = check_problems(with_size(self.doc, self.knob, size), costed=True)
        return self.verified[size]

    def _retyped(self, size: int) -> Problems:
        try:
            types = _input_types(with_size(self.doc, self.knob, size))
        except SpecError as exc:
            return problems_of(exc)
        graph = self.graph
        for name in self.names:
            meta = graph.meta(name)
            if name in types:
                meta["type"] = types[name]
            else:
                meta.pop("type", None)
        try:
            ShapeInference(graph).run()
        except SpecError as exc:
            return problems_of(exc)
        except Exception as exc:  # noqa: BLE001 - as in check_problems
            return frozenset({(None, None, f"the checker failed: {exc!r}")})
        return PASSES

    # -- searches ----------------------------------------------------------------------
    def cures(self, size: int, baseline: Problems) -> bool:
        """Whether `size` removes some of `baseline`'s problems and brings none of its own
        (with one problem: whether the spec passes at `size`)."""
        found = self.problems(size)
        return found < baseline

    def nearest(self, baseline: Problems, seconds: float = SEARCH_SECONDS) -> list[int]:
        """Sizes that cure `baseline` (see `cures`), verified by the whole pipeline: the
        nearest below the spec's size and the nearest above it (the two smallest above when
        none is below), searched outward from the spec's size within `seconds`."""
        start, deadline = self.knob.size, time.perf_counter() + seconds
        below: list[int] = []
        above: list[int] = []
        for step in range(1, FARTHEST):
            if time.perf_counter() > deadline:
                break
            low, high = start - step, start + step
            if low >= 1 and not below and self._cures_verified(low, baseline):
                below.append(low)
            if len(above) < 2 and self._cures_verified(high, baseline):
                above.append(high)
            if (below and above) or (low <= 1 and len(above) == 2):
                break
        return below + above[:1] if below else above

    def _cures_verified(self, size: int, baseline: Problems) -> bool:
        return self.cures(size, baseline) and self.verify(size) < baseline

    @property
    def size_blind(self) -> bool:
        """Whether the size reaches only the inputs (each size retypes one IR: fast), not also
        params the graph is made from (each size runs the whole pipeline: slow)."""
        return self.graph is not None

    def sizes(self, lo: int, hi: int, progress=None) -> list[int]:
        """Every size in lo..hi at which the whole spec passes (costs included); `progress`,
        when given, is called (sizes checked, sizes in all) every PROGRESS_SECONDS."""
        passing, shown = [], time.perf_counter()
        for s in range(lo, hi + 1):
            if self.problems(s) == PASSES and self._costs(s) == PASSES:
                passing.append(s)
            if progress is not None and time.perf_counter() - shown > PROGRESS_SECONDS:
                progress(s - lo + 1, hi - lo + 1)
                shown = time.perf_counter()
        return passing

    def export_range(self, lo: int, hi: int) -> tuple[int, int, int] | None:
        """(min, max, step) for an export whose image sides may be any multiple of `step` from
        `min` to `max`, every one passing the spec: lo..hi cut to its first and last passing
        sizes, and the smallest step whose multiples there all pass. None when at most one
        size in lo..hi passes (the export is static)."""
        valid = self.sizes(lo, hi)
        if len(valid) < 2:
            return None
        lo, hi, passing = valid[0], valid[-1], set(valid)
        for step in range(1, hi + 1):
            multiples = range(-(-lo // step) * step, hi + 1, step)
            if len(multiples) >= 2 and all(m in passing for m in multiples):
                return lo, hi, step
        return None

    def _costs(self, size: int) -> Problems:
        """After `problems(size)` passed: what costing finds (on the retyped IR when the size
        reaches only the inputs, else by the whole pipeline)."""
        if self.graph is None:
            return self.verify(size)
        self._retyped(size)
        try:
            cost(self.graph)
        except SpecError as exc:
            return problems_of(exc)
        return PASSES


# -- param values --------------------------------------------------------------------------
def param_values_that_cure(doc: Document, param: str, values: Iterable[int], baseline: Problems,
                           seconds: float = SEARCH_SECONDS) -> list[int] | None:
    """The values of `param` among `values` that cure `baseline` (as SizeSolver.cures), or
    None when no value changes what the check finds (the param does not control the problem)."""
    deadline = time.perf_counter() + seconds
    good, changed = [], False
    for value in values:
        if time.perf_counter() > deadline:
            break
        found = check_problems(apply_overrides(doc, {param: value}), costed=True)
        changed = changed or found != baseline
        if found < baseline:
            good.append(value)
    return good if changed else None


# -- describing sizes ----------------------------------------------------------------------
def describe_sizes(sizes: list[int], lo: int, hi: int) -> str:
    """'224, 448, 672 (every multiple of 224)', or runs: '221-224, 253-256, ...'."""
    if not sizes:
        return "none"
    step = 0
    for s in sizes:
        step = gcd(step, s)
    if len(sizes) > 1 and sizes == list(range(-(-lo // step) * step, hi + 1, step)):
        return f"{', '.join(map(str, _shorten(sizes)))} (every multiple of {step})"
    runs = _runs(sizes)
    period = _period(sizes, lo, hi)
    if period and len(runs) > 6:
        return f"{', '.join(map(str, _shorten(runs, 6)))} (repeating every {period})"
    return ", ".join(runs)


def _period(sizes: list[int], lo: int, hi: int) -> int | None:
    """The smallest p (at most a third of the range) with: s passes iff s + p passes, in lo..hi."""
    found = set(sizes)
    for p in range(1, (hi - lo + 1) // 3 + 1):
        if all((s + p in found) == (s in found) for s in range(lo, hi + 1 - p)):
            return p
    return None


def _shorten(sizes: list[int], most: int = 12) -> list:
    return sizes if len(sizes) <= most else sizes[:most - 2] + ["...", sizes[-1]]


def _runs(sizes: list[int]) -> list[str]:
    runs: list[list[int]] = []
    for s in sizes:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return [str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
