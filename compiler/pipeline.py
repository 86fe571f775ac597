"""The pipeline in one place: compose -> validate/expand -> infer -> cost (-> lower)."""

from __future__ import annotations

from typing import Any, Mapping

from archspec.compose import compose
from archspec.report import Report

from .cost import cost
from .expand import expand
from .infer import infer


def check_spec(spec, overrides: Mapping[str, Any] | None = None) -> Report:
    doc = compose(spec, overrides)
    graph = cost(infer(expand(doc)))
    return Report.from_graph(graph)


def build_spec(spec, overrides=None, seed: int = 0, weights=None):
    from .lower import lower

    report = check_spec(spec, overrides)
    model = lower(report.graph, seed=seed)
    if weights is not None:
        from .weights import load_weights

        load_weights(model, weights, report.graph)
    return model
