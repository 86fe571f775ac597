"""report.html: one self-contained page (no scripts, no external fonts, styles and pictures
inline) with the graph as SVG, params and FLOPs per stage as a bar chart, and the per-node
table of `archspec check`.

`report_html(report)` is what a build writes; `picture_html(pic)` is the page for a picture
alone (a spec that does not check: the graph with its errors drawn, and the errors listed).
"""

from __future__ import annotations

import html

from ..core.visible import visible
from ..report import Report, human
from .picture import MULTIPLY, Box, Cluster, Picture, figures, picture, short
from .svg import to_svg



def escape(text: str) -> str:
    """`text` as HTML: &, <, >, quotes escaped, control characters written as visible escapes."""
    return html.escape(visible(text, keep="\n\t"))


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 24px 32px; color: #1f2328; background: #ffffff; }
h1 { font-size: 24px; margin: 0 0 4px 0; }
h2 { font-size: 18px; margin: 28px 0 10px 0; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
.summary { color: #57606a; margin: 2px 0; }
.mono, td, th { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; }
.doc { max-width: 60em; }
.errors li { color: #cf222e; margin-bottom: 6px; white-space: pre-wrap; }
.warnings li { color: #9a6700; margin-bottom: 6px; white-space: pre-wrap; }
.graph { text-align: center; overflow: auto; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px; max-height: 1400px; }
table { border-collapse: collapse; font-size: 12px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eaeef2; text-align: left; white-space: nowrap; }
th { background: #f6f8fa; position: sticky; top: 0; }
td.num, th.num { text-align: right; }
tr.total td { font-weight: bold; border-top: 2px solid #d0d7de; }
.chart text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
              font-size: 12px; fill: #1f2328; }
.chart .params { fill: #4a7fc1; }
.chart .flops { fill: #3c9a5f; }
.chart .value { fill: #57606a; font-size: 11px; }
"""

ROW = 24
NAME_W = 200
BAR_W = 300
VALUE_W = 90


def report_html(report: Report, expand: bool = False) -> str:
    """The page for a checked spec: graph, per-stage chart, per-node table, warnings."""
    pic = picture(report.graph, expand=expand)
    return _page(pic, report)


def picture_html(pic: Picture) -> str:
    """The page for a picture alone (with the errors of a spec that does not check)."""
    return _page(pic, None)


def _page(pic: Picture, report: Report | None) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{escape(pic.name)}: archspec report</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
             f"<h1>{escape(pic.name)}</h1>",
             f'<p class="summary mono">{escape(pic.summary)}</p>',
             f'<p class="summary">{escape(_totals(pic, report))}</p>']
    doc = report.graph.doc if report is not None else ""
    if doc:
        parts.append(f'<p class="doc">{escape(doc)}</p>')
    if pic.errors:
        parts.append("<h2>Errors</h2>")
        parts.append(_diagnostics(pic.errors, "errors"))
    parts += ["<h2>Graph</h2>", f'<div class="graph">{_inline(to_svg(pic))}</div>']
    stages = stage_figures(pic)
    if stages and pic.ok:
        basis = report.flops_basis if report is not None else "per sample"
        parts += ["<h2>Params and FLOPs per stage</h2>", stage_chart(stages, basis)]
    if report is not None:
        parts += ["<h2>Nodes</h2>", node_table(report)]
        if report.warnings:
            parts += ["<h2>Warnings</h2>", _diagnostics(report.warnings, "warnings")]
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def _totals(pic: Picture, report: Report | None) -> str:
    if report is not None:
        return (f"{report.params:,} params, {human(report.flops)}FLOPs {report.flops_basis} "
                "(multiply-add = 2; matmul, conv and attention)")
    state = "the spec checks" if pic.ok else f"{len(pic.errors)} error{'s' if len(pic.errors) != 1 else ''}"
    return f"{figures(pic.params, pic.flops)} where checked; {state}"


def _inline(svg: str) -> str:
    """The SVG without its XML declaration, to sit inside HTML."""
    return svg.split("?>", 1)[1].lstrip() if svg.startswith("<?xml") else svg


def _diagnostics(diagnostics, cls: str) -> str:
    items = "".join(f"<li class=\"mono\">{escape(d.text())}</li>" for d in diagnostics)
    return f'<ul class="{cls}">{items}</ul>'


def stage_figures(pic: Picture) -> list[tuple[str, int, int]]:
    """(name, params, FLOPs) of each stage: the top-level nodes and groups, a repeat drawn copy
    by copy counted per copy (Swin's stages.0 .. stages.3), a collapsed one as a whole."""
    found = []
    for child in pic.root.children:
        if isinstance(child, Box):
            if child.role == "node":
                found.append((child.name, (child.params or 0) * child.copies, (child.flops or 0) * child.copies))
        elif MULTIPLY not in child.title and child.note.startswith("repeat"):
            found += [(c.title, c.params, c.flops) for c in child.children if isinstance(c, Cluster)]
        else:
            found.append((child.title, child.params, child.flops))
    return found


def stage_chart(stages: list[tuple[str, int, int]], basis: str = "per sample") -> str:
    """Two bar charts side by side, params and FLOPs (`basis`: per sample, at which lengths),
    one row per stage (inline SVG)."""
    most_params = max((p for _, p, _ in stages), default=0) or 1
    most_flops = max((f for _, _, f in stages), default=0) or 1
    left, right = NAME_W, NAME_W + BAR_W + VALUE_W + 20
    width, height = right + BAR_W + VALUE_W, ROW * (len(stages) + 1) + 8
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img">',
             f'<text x="{left}" y="16" font-weight="bold">params</text>',
             f'<text x="{right}" y="16" font-weight="bold">FLOPs {escape(basis)}</text>']
    for i, (name, params, flops) in enumerate(stages):
        y = ROW * (i + 1) + 4
        pw, fw = BAR_W * params / most_params, BAR_W * flops / most_flops
        parts += [f'<g class="stage" data-stage="{escape(name)}">',
                  f'<text x="0" y="{y + 14}">{escape(_clip(name, 27))}</text>',
                  f'<rect class="params" x="{left}" y="{y + 3}" width="{pw:.1f}" height="{ROW - 8}"/>',
                  f'<text class="value" x="{left + pw + 6:.1f}" y="{y + 14}">{short(params)}</text>',
                  f'<rect class="flops" x="{right}" y="{y + 3}" width="{fw:.1f}" height="{ROW - 8}"/>',
                  f'<text class="value" x="{right + fw + 6:.1f}" y="{y + 14}">{short(flops)}</text>', "</g>"]
    parts.append("</svg>")
    return "\n".join(parts)


def _clip(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "\u2026"


def node_table(report: Report) -> str:
    head = ("<tr><th>node</th><th>op</th><th>output</th><th class=\"num\">params</th>"
            "<th class=\"num\">FLOPs</th><th class=\"num\">output bytes</th></tr>")
    rows = [f"<tr><td>{escape(r.path)}</td><td>{escape(r.op)}</td><td>{escape(r.shape)}</td>"
            f"<td class=\"num\">{r.params:,}</td><td class=\"num\">{escape(human(r.flops))}</td>"
            f"<td class=\"num\">{r.activation_bytes:,}</td></tr>" for r in report.nodes]
    total = (f"<tr class=\"total\"><td>total</td><td></td><td></td><td class=\"num\">{report.params:,}</td>"
             f"<td class=\"num\">{escape(human(report.flops))}</td><td></td></tr>")
    return f"<table>\n<thead>{head}</thead>\n<tbody>\n" + "\n".join(rows) + f"\n{total}\n</tbody>\n</table>"
