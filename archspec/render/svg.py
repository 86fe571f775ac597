"""The picture as a self-contained SVG: no scripts, no external fonts, styles inline.

Boxes are `<g class="node ...">` groups with the node's path in `data-path` and a `<title>`
(the browser's tooltip) holding the path, op, type and figures; clusters are
`<g class="cluster">`; edges `<g class="edge">` with the tensor they carry. A failed node is
drawn red with its error and hint inside it; errors that name no drawn node are listed under
the title.

Text from the spec is escaped for XML with its control characters written as visible escapes
(XML 1.0 allows none but tab and line breaks), so the file is valid XML whatever the names hold.
"""

from __future__ import annotations

from xml.sax import saxutils

from ..core.visible import visible
from .layout import BOX_PAD_X, BOX_PAD_Y, FONT, LINE, Layout, Rect, header_texts, layout
from .picture import Box, Cluster, Picture, box_lines, cluster_lines, error_lines, figures, walk


def escape(text: str) -> str:
    """`text` as XML character data: &, < and > escaped, control characters made visible."""
    return saxutils.escape(visible(text, keep="\n\t"))


def quoteattr(text: str) -> str:
    """`text` as a quoted XML attribute value, control characters made visible."""
    return saxutils.quoteattr(visible(text, keep="\n\t"))


STYLE = """
svg { background: #ffffff; }
text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: %dpx; fill: #1f2328; }
.title { font-size: 16px; font-weight: bold; }
.cluster > rect { fill: #f6f8fa; stroke: #8c959f; stroke-dasharray: 4 3; }
.cluster.repeat > rect { fill: #eef4ff; stroke: #6e8ccf; }
.cluster.block > rect { fill: #f3f0ff; stroke: #8a7bd1; }
.cluster-head text, .edge-label { paint-order: stroke; stroke-width: 5px; stroke-linejoin: round; }
.cluster-head text { stroke: #f6f8fa; }
.cluster-head.repeat text { stroke: #eef4ff; }
.cluster-head.block text { stroke: #f3f0ff; }
.cluster-head .head { font-weight: bold; }
.figures { fill: #57606a; }
.node > rect { fill: #ffffff; stroke: #57606a; rx: 6; ry: 6; }
.node .name { font-weight: bold; }
.node.attention > rect { fill: #ddeeff; stroke: #4a7fc1; }
.node.mlp > rect { fill: #dff5e3; stroke: #3c9a5f; }
.node.patchify > rect, .node.embed > rect { fill: #fff1dc; stroke: #c98a2b; }
.node.merge > rect { fill: #f6e3ff; stroke: #9a5ac7; }
.node.norm > rect { fill: #eeeeee; stroke: #8c8c8c; }
.node.head > rect { fill: #dcf4f4; stroke: #2f9c9c; }
.node.input > rect, .node.output > rect { fill: #ffffff; stroke: #1f2328; stroke-width: 2; rx: 16; ry: 16; }
.node.skipped > rect { fill: #fafafa; stroke: #b0b7be; stroke-dasharray: 3 3; }
.node.skipped text { fill: #8c959f; }
.node.error > rect { fill: #ffebe9; stroke: #cf222e; stroke-width: 2.5; }
.error-text { fill: #cf222e; }
.cluster.error > rect { stroke: #cf222e; }
.cluster-head .error-text { fill: #cf222e; }
.edge path { fill: none; stroke: #57606a; stroke-width: 1.3; }
.edge-label { fill: #0b5cad; font-size: 11px; stroke: #ffffff; }
""" % FONT


def to_svg(pic: Picture) -> str:
    geo = layout(pic)
    parts = [f'<?xml version="1.0" encoding="UTF-8"?>',
             f'<svg xmlns="http://www.w3.org/2000/svg" width="{geo.width:.0f}" height="{geo.height:.0f}" '
             f'viewBox="0 0 {geo.width:.0f} {geo.height:.0f}" class="archspec-graph" '
             f'data-spec={quoteattr(pic.name)}>',
             f"<title>{escape(pic.name)}: {escape(pic.summary)}</title>",
             f"<style>{STYLE}</style>",
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#57606a"/></marker></defs>']
    parts += _header(pic)
    clusters = [c for c in walk(pic.root) if isinstance(c, Cluster) and c is not pic.root]
    # Layers, bottom to top: cluster frames, edges, cluster headings (a halo of the frame's
    # colour hides the edges under them), boxes, edge labels.
    for cluster in clusters:
        parts += _cluster(cluster, geo.rect(cluster))
    lines, labels = _edges(pic, geo)
    parts += lines
    for cluster in clusters:
        parts += _cluster_head(cluster, geo.rect(cluster))
    for box in pic.boxes():
        parts += _box(box, geo.rect(box))
    parts += labels
    parts.append("</svg>")
    return visible("\n".join(parts), keep="\n\t") + "\n"  # (a guard: every text above is escaped)


def _text(x: float, y: float, text: str, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}"{attr}>{escape(text)}</text>'


def _header(pic: Picture) -> list[str]:
    title, summary, totals = header_texts(pic)
    parts = ['<g class="header">', _text(20, 26, title, "title"), _text(20, 26 + LINE + 2, summary),
             _text(20, 26 + 2 * LINE + 2, totals, "error-text" if not pic.ok else "figures")]
    y = 26 + 3 * LINE + 2
    for diag in pic.unplaced:
        for line in error_lines(diag, 110):
            parts.append(_text(20, y, line, "error-text"))
            y += LINE
    parts.append("</g>")
    return parts


def _cluster_kind(cluster: Cluster) -> str:
    if "\u00d7" in cluster.title or cluster.note.startswith("repeat"):
        return "repeat"
    return "block" if cluster.note else "group"


def _cluster(cluster: Cluster, r: Rect) -> list[str]:
    classes = f"cluster {_cluster_kind(cluster)}" + (" error" if cluster.errors else "")
    head, figs = cluster_lines(cluster)
    return [f'<g class="{classes}" id={quoteattr("cluster-" + cluster.key)} data-path={quoteattr(cluster.key)}>'
            f"<title>{escape(head)}: {escape(figs)}</title>"
            f'<rect x="{r.x:.1f}" y="{r.y:.1f}" width="{r.w:.1f}" height="{r.h:.1f}" rx="8" ry="8"/></g>']


def _cluster_head(cluster: Cluster, r: Rect) -> list[str]:
    head, figs = cluster_lines(cluster)
    parts = [f'<g class="cluster-head {_cluster_kind(cluster)}" data-path={quoteattr(cluster.key)}>',
             _text(r.x + 10, r.y + LINE, head, "head"), _text(r.x + 10, r.y + 2 * LINE, figs, "figures")]
    y = r.y + 3 * LINE
    for diag in cluster.errors:
        for line in error_lines(diag):
            parts.append(_text(r.x + 10, y, line, "error-text"))
            y += LINE
    parts.append("</g>")
    return parts


def _box(box: Box, r: Rect) -> list[str]:
    primitive = box.op.split("/")[0] if box.role == "node" else box.role
    classes = f"node {primitive}" + (" error" if box.errors else "") + (" skipped" if box.skipped else "")
    tip = [box.key if box.role == "node" else f"{box.role} {box.name}", box.op_text, box.type_text or "not typed"]
    if box.role == "node" and box.params is not None:
        tip.append(figures(box.params, box.flops) + (f" each, {box.copies} copies" if box.copies > 1 else ""))
    tip += [d.text() for d in box.errors]
    parts = [f'<g class="{classes}" id={quoteattr("node-" + box.key.replace(":", "-"))} '
             f'data-path={quoteattr(box.key)} data-op={quoteattr(box.op_text)}>',
             f"<title>{escape(chr(10).join(tip))}</title>",
             f'<rect x="{r.x:.1f}" y="{r.y:.1f}" width="{r.w:.1f}" height="{r.h:.1f}" rx="6" ry="6"/>']
    y = r.y + BOX_PAD_Y + LINE - 4
    for i, line in enumerate(box_lines(box)):
        parts.append(_text(r.x + BOX_PAD_X, y, line, ("name", "op", "figures")[min(i, 2)]))
        y += LINE
    for diag in box.errors:
        for line in error_lines(diag):
            parts.append(_text(r.x + BOX_PAD_X, y, line, "error-text"))
            y += LINE
    parts.append("</g>")
    return parts


def _edges(pic: Picture, geo: Layout) -> tuple[list[str], list[str]]:
    """The edges' lines, and their labels: one per source, the tensor it gives, under it."""
    lines, labels = [], []
    labelled: set[str] = set()
    boxes = {b.key: b for b in pic.boxes()}
    for route in geo.routes:
        edge = route.edge
        d = "M " + " L ".join(f"{x:.1f} {y:.1f}" for x, y in route.points)
        lines.append(f'<g class="edge" data-from={quoteattr(edge.source)} data-to={quoteattr(edge.target)}>'
                     f"<title>{escape(edge.source)} \u2192 {escape(edge.target)}: {escape(edge.label)}</title>"
                     f'<path d="{d}" marker-end="url(#arrow)"/></g>')
        if edge.label and edge.source not in labelled:
            labelled.add(edge.source)
            r = geo.rect(boxes[edge.source])
            labels.append(_text(r.cx + 6, r.bottom + 14, edge.label, "edge-label"))
    return lines, labels
