"""Assemble one spec document from its file, the files it `extends` (extends.py, with the
graph edits of edits.py), and `--set` overrides of its params (overrides.py).
"""

from __future__ import annotations

from typing import Mapping

from ..core.errors import SpecError
from .extends import with_bases
from .loader import Document
from .overrides import apply_overrides, parse_override

__all__ = ["compose", "apply_overrides", "parse_override"]


def compose(doc: Document, overrides: Mapping[str, object] | None = None) -> Document:
    """The loaded spec with the specs it extends laid under it and `overrides` applied."""
    try:
        doc = with_bases(doc)
        if overrides:
            doc = apply_overrides(doc, overrides)
    except SpecError as exc:
        raise exc.with_sources(doc.sources) from None
    return doc
