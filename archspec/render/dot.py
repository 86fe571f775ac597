"""The picture as Graphviz DOT: clusters are `subgraph cluster_*`, edges carry the tensor's
type as their label, failed nodes are red and hold their error. `dot -Tsvg` draws it; archspec
itself needs no Graphviz."""

from __future__ import annotations

from ..core.visible import visible
from .picture import Box, Cluster, Picture, box_lines, cluster_lines, error_lines, figures

FILL = {"attention": "#ddeeff", "mlp": "#dff5e3", "patchify": "#fff1dc", "embed": "#fff1dc", "merge": "#f6e3ff",
        "norm": "#eeeeee", "head": "#dcf4f4"}


def quote(text: str) -> str:
    """A DOT string: quotes and backslashes escaped, line breaks as \\n, other control
    characters shown as their escapes (visible), so that no name can end the string or the line."""
    return '"' + visible(text, keep="\n").replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(pic: Picture) -> str:
    state = "checks" if pic.ok else f"{len(pic.errors)} error(s)"
    title = [pic.name, pic.summary, f"{figures(pic.params, pic.flops)} in total, {state}"]
    title += [line for d in pic.unplaced for line in error_lines(d, 100)]
    lines = [f"digraph {quote(pic.name)} {{",
             f"  graph [rankdir=TB, labelloc=t, labeljust=l, fontname=monospace, label={quote(chr(10).join(title))}];",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname=monospace, fontsize=10];',
             "  edge [fontname=monospace, fontsize=9, fontcolor=\"#0b5cad\"];"]
    _children(pic.root, lines, "  ")
    for edge in pic.edges:
        lines.append(f"  {quote(edge.source)} -> {quote(edge.target)} [label={quote(edge.label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _children(cluster: Cluster, lines: list[str], indent: str) -> None:
    for child in cluster.children:
        if isinstance(child, Box):
            lines.append(indent + _node(child))
        else:
            head = cluster_lines(child) + [line for d in child.errors for line in error_lines(d)]
            color = "#cf222e" if child.errors else "#8c959f"
            lines.append(f"{indent}subgraph {quote('cluster_' + child.key)} {{")
            lines.append(f"{indent}  label={quote(chr(10).join(head))}; style=\"rounded,dashed\"; color={quote(color)};")
            _children(child, lines, indent + "  ")
            lines.append(f"{indent}}}")


def _node(box: Box) -> str:
    text = box_lines(box) + [line for d in box.errors for line in error_lines(d)]
    attrs = [f"label={quote(chr(10).join(text))}", f"tooltip={quote(box.key)}"]
    if box.role != "node":
        attrs += ["shape=box", 'style="rounded,bold"']
    elif box.errors:
        attrs += ['fillcolor="#ffebe9"', 'color="#cf222e"', "penwidth=2.5", 'fontcolor="#cf222e"']
    elif box.skipped:
        attrs += ['style="rounded,dashed"', 'fontcolor="#8c959f"']
    else:
        attrs.append(f"fillcolor={quote(FILL.get(box.op.split('/')[0], '#ffffff'))}")
    return f"{quote(box.key)} [{', '.join(attrs)}];"
