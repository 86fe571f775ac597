"""Which format a file name asks for, and the text of a picture in that format."""

from __future__ import annotations

import os

from ..core.errors import UsageError
from .picture import Picture

FORMATS = {".svg": "svg", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid", ".md": "markdown", ".html": "html",
           ".htm": "html"}


def format_of(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise UsageError(f"cannot tell the format of {path!r} from its extension; use one of "
                         f"{', '.join(FORMATS)}")
    return FORMATS[ext]


def render(pic: Picture, fmt: str) -> str:
    """The picture as text in `fmt` (svg, dot, mermaid, markdown; html: see html.py)."""
    if fmt == "svg":
        from .svg import to_svg

        return to_svg(pic)
    if fmt == "dot":
        from .dot import to_dot

        return to_dot(pic)
    if fmt in ("mermaid", "markdown"):
        from .mermaid import to_markdown, to_mermaid

        return to_mermaid(pic) if fmt == "mermaid" else to_markdown(pic)
    if fmt == "html":
        from .html import picture_html

        return picture_html(pic)
    raise UsageError(f"unknown picture format {fmt!r}")
