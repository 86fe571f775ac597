"""The pipeline in one place: load -> compose -> expand -> infer -> cost (-> lower, weights).

Everything up to `cost` imports no torch; `lower_report` imports the torch floor when called.

A failed check's hints are solved for the whole spec before they are shown (`solve_hints`):
a shape rule sees one node, so its hint alone ("or an input of 252") may lead into the next
error; the size solver (sizes.py) re-checks candidates and the hints name only input sizes and
param values that pass every node. The solver reads each rule's `Suggestion` (the parameter, the
values it may take, whether the input size matters) and refines it; the hint's words are
rendered from it (core/suggestions.py), never parsed. `attempt_*` give what a failed check still knows (the IR,
typed and costed where the rules passed), for pictures and editors.
"""

from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Mapping

from .core.errors import Diagnostic, SpecError
from .core.suggestions import CheckedSizes, Divides
from .core.interpreter import NodeFailed
from .core.ir import Graph, NodeView
from .language.compose import compose
from .language.expand import expand
from .language.given import bare_name, located_at_uses, paths_by_loc
from .language.param_types import value_at
from .language.loader import Document, load_file, load_text
from .primitives.cost import Costing, cost
from .primitives.infer import infer
from .report import Report
from .sizes import (PASSES, SizeSolver, check_problems, find_knob, hint_seconds, key_of, param_values_that_cure,
                    problems_of)


def check_document(doc: Document, overrides: Mapping[str, Any] | None = None) -> Report:
    doc = compose(doc, overrides)
    graph = None
    try:
        graph = expand(doc)
        cost(infer(graph))
    except SpecError as exc:
        raise located_at_uses(solve_hints(exc, doc), graph, doc).with_sources(doc.sources) from None
    return Report.from_graph(graph)


def check_file(path: str, overrides: Mapping[str, Any] | None = None) -> Report:
    with collection_paused():
        return check_document(load_file(path), overrides)


def check_text(text: str, overrides: Mapping[str, Any] | None = None, name: str = "<spec>") -> Report:
    with collection_paused():
        return check_document(load_text(text, name), overrides)


@contextmanager
def collection_paused():
    """Python's cyclic garbage collector off while a spec is checked: a check allocates many
    small objects that all live until it ends (bounded by language/limits.py), and collections
    scanning them took 40% of checking a 3,000-node spec. Cycles are collected afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def lower_report(report: Report, seed: int = 0, weights=None, mapping=None):
    """The checked spec as a torch.fx.GraphModule, with weights loaded if given: in archspec's
    naming, a naming of the spec's mapping files, or that of `mapping` (one more file, tried first)."""
    from .compiler.lower import lower

    model = lower(report.graph, seed=seed)
    if weights is not None:
        from .compiler.weights.load import load_weights

        load_weights(model, weights, report.graph, [mapping] if mapping is not None else [])
    return model


# -- a check that may fail ---------------------------------------------------------------------
@dataclass
class Attempt:
    """A check that may have failed: the report when it passed; else the error and the IR as far
    as it got (None when the spec did not expand; else typed and costed where the rules passed)."""

    report: Report | None
    graph: Graph | None
    error: SpecError | None
    document: Document | None = None  # the composed spec, when it composed


def attempt_document(doc: Document, overrides: Mapping[str, Any] | None = None) -> Attempt:
    try:
        doc = compose(doc, overrides)
        graph = expand(doc)
    except SpecError as exc:
        return Attempt(None, None, exc.with_sources(doc.sources))
    try:
        return Attempt(Report.from_graph(cost(infer(graph))), graph, None, doc)
    except SpecError as exc:
        PartialCosting(graph).run()
        return Attempt(None, graph, located_at_uses(solve_hints(exc, doc), graph, doc).with_sources(doc.sources), doc)


def attempt_file(path: str, overrides: Mapping[str, Any] | None = None) -> Attempt:
    try:
        doc = load_file(path)
    except SpecError as exc:
        return Attempt(None, None, exc)
    return attempt_document(doc, overrides)


def attempt_text(text: str, overrides: Mapping[str, Any] | None = None, name: str = "<spec>") -> Attempt:
    try:
        doc = load_text(text, name)
    except SpecError as exc:
        return Attempt(None, None, exc)
    return attempt_document(doc, overrides)


class PartialCosting(Costing):
    """Costs of the nodes shape inference typed; the others (and their readers) are skipped."""

    def call(self, node: NodeView, inputs):
        if node.type is None:
            raise NodeFailed()
        return super().call(node, inputs)


# -- hints solved for the whole spec -----------------------------------------------------------
MOST_VALUES = 6
SIZE_SECONDS, PARAM_SECONDS = hint_seconds(0.15), hint_seconds(0.1)  # a failed check's hints: about 0.25 s
# (and one check more for another way out, such as pad: true)


def solve_hints(exc: SpecError, doc: Document) -> SpecError:
    """`exc` with hints that name only sizes and param values passing the whole spec (as far
    as the other errors allow: a value is named when it removes the problem and brings none).
    It reads and refines each diagnostic's `Suggestion`; the hint text follows from it."""
    diagnostics = exc.diagnostics
    if not any(d.severity == "error" for d in diagnostics):
        return exc
    baseline = problems_of(exc)
    try:
        solved = [_solve_otherwise(_solve_param(d, doc, baseline), doc, baseline) for d in diagnostics]
        solved = [_where_written(d, doc) for d in _solve_size(solved, doc, baseline)]
    except Exception:  # noqa: BLE001 - better hints must never cost the user the error itself
        if os.environ.get("ARCHSPEC_DEBUG"):
            raise
        return exc
    if solved == diagnostics:
        return exc
    return SpecError(solved, exc.sources)


def _where_written(d: Diagnostic, doc: Document) -> Diagnostic:
    """A diagnostic at a base spec's `${param}` whose value another file wrote (a spec that
    extends it: vit_ti16's `heads: 5` read by vit_b16's `heads: ${heads}`) points at that value,
    naming where it is read: the line the user wrote and can change."""
    param = _param_at(doc, d)
    written = doc.locs.get(("params", param)) if param is not None else None
    if written is None or d.loc is None or written.file == d.loc.file or written.file.startswith("<"):
        return d
    read = f"{os.path.basename(d.loc.file)}:{d.loc.line}"
    return replace(d, loc=written, message=f"{d.message} (param '{param}', read as ${{{param}}} at {read})")


def _solve_size(diagnostics: list[Diagnostic], doc: Document, baseline) -> list[Diagnostic]:
    """Each size-related hint names the nearest input sizes that cure its problem; a size no
    check has confirmed is dropped from the hint."""
    knob = find_knob(doc)
    if knob is None or not any(_size_matters(d) for d in diagnostics):
        return diagnostics
    solver = SizeSolver(doc, knob)
    if solver.problems(knob.size) != baseline:  # the failure is not one the solver reproduces
        return [_with_input(d, None) for d in diagnostics]
    sizes = solver.nearest(baseline, SIZE_SECONDS)
    cured = {key for key in baseline if sizes and all(key not in solver.verify(s) for s in sizes)}
    return [_with_input(d, CheckedSizes(tuple(sizes)) if key_of(d) in cured else None) for d in diagnostics]


def _size_matters(d: Diagnostic) -> bool:
    return d.severity == "error" and d.suggestion is not None and d.suggestion.size_matters


def _with_input(d: Diagnostic, advice: CheckedSizes | None) -> Diagnostic:
    """`d` whose hint says `advice` about the input size (None: nothing)."""
    if d.suggestion is None or d.suggestion.input == advice:
        return d
    return replace(d, suggestion=replace(d.suggestion, input=advice))


def _solve_param(d: Diagnostic, doc: Document, baseline) -> Diagnostic:
    """'use a window that divides 56 (2, 4, 7, 8, 14, 28)': when the value is a param of the
    spec (`window: ${window}`), name only the divisors with which the whole spec passes."""
    suggestion = d.suggestion
    divides = suggestion.advice if suggestion is not None and d.severity == "error" else None
    param = _param_at(doc, d) if isinstance(divides, Divides) else None
    literal = _literal_at(doc, d) if isinstance(divides, Divides) and param is None else None
    if param is None and literal is None:
        return d
    current = doc.data["params"][param] if param is not None else value_at(doc.data, literal)
    candidates = sorted(divides.candidates, key=lambda v: (abs(v - current) if isinstance(current, int) else 0, v))
    if param is not None:
        good = param_values_that_cure(doc, param, candidates, baseline, PARAM_SECONDS)
    else:  # a number written in place (`heads: 5`): each candidate written there, the whole spec checked
        good = literal_values_that_cure(doc, literal, candidates, baseline, PARAM_SECONDS)
    if good is None:
        return d
    passing = tuple(sorted(good[:MOST_VALUES]))
    return replace(d, suggestion=replace(suggestion, advice=replace(divides, passing=passing)))


def _solve_otherwise(d: Diagnostic, doc: Document, baseline) -> Diagnostic:
    """'or set pad: true ...': kept when the spec with that field set on the node passes there
    (the problem gone, none brought), else dropped (a shifted window elsewhere would still fail)."""
    suggestion = d.suggestion
    divides = suggestion.advice if suggestion is not None and d.severity == "error" else None
    if not isinstance(divides, Divides) or divides.otherwise is None:
        return d
    path = _path_at(doc, d)
    setting = divides.otherwise
    edited = _with_value(doc, path[:-1] + (setting.field,), setting.value) if path else None
    if edited is not None and check_problems(edited, costed=True) < baseline:
        return d
    return replace(d, suggestion=replace(suggestion, advice=replace(divides, otherwise=None)))


def _with_value(doc: Document, path: tuple, value: Any) -> Document | None:
    """`doc` with the value at `path` set (the mappings and lists on the way copied), or None
    when `path` does not lead through mappings and lists."""
    data = root = _copied(doc.data)
    for key in path[:-1]:
        try:
            data[key] = _copied(data[key])
        except (KeyError, IndexError, TypeError):
            return None
        data = data[key]
    if not isinstance(data, dict):
        return None
    data[path[-1]] = value
    return replace(doc, data=root)


def _copied(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value


def _param_at(doc: Document, d: Diagnostic) -> str | None:
    """The spec param written as the whole value the diagnostic points at (`${window}`), if
    it is one (and no block parameter of the same name hides it)."""
    path = _path_at(doc, d)
    value = value_at(doc.data, path) if path is not None else None
    name = bare_name(value)
    params = doc.data.get("params") if isinstance(doc.data, dict) else None
    if not name or not isinstance(params, dict) or name not in params or not isinstance(params[name], int):
        return None
    if path[0] == "blocks" and len(path) > 1 and name in ((doc.data["blocks"].get(path[1]) or {}).get("params") or {}):
        return None
    return name


def _literal_at(doc: Document, d: Diagnostic) -> tuple | None:
    """The document path of the whole number written where the diagnostic points, if it is one."""
    path = _path_at(doc, d)
    value = value_at(doc.data, path) if path is not None else None
    return path if isinstance(value, int) and not isinstance(value, bool) else None


def literal_values_that_cure(doc: Document, path: tuple, values, baseline, seconds: float) -> list[int] | None:
    """The values among `values` that, written at `path`, cure `baseline` (param_values_that_cure's
    rule), or None when none changes what the check finds."""
    deadline = time.perf_counter() + seconds
    good, changed = [], False
    for value in values:
        if time.perf_counter() > deadline:
            break
        edited = _with_value(doc, path, value)
        if edited is None:
            return None
        found = check_problems(edited, costed=True)
        changed = changed or found != baseline
        if found < baseline:
            good.append(value)
    return good if changed else None


def _path_at(doc: Document, d: Diagnostic) -> tuple | None:
    """The document path of the value the diagnostic points at, or None."""
    if d.loc is None:
        return None
    return paths_by_loc(doc).get(d.loc)


__all__ = ["check_document", "check_file", "check_text", "lower_report", "Attempt", "attempt_document",
           "attempt_file", "attempt_text", "solve_hints", "check_problems", "PASSES"]
