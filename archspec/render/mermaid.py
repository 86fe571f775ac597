"""The picture as a Mermaid flowchart (top to bottom): clusters are `subgraph`s, edges carry
the tensor's type, failed nodes get the `error` class and hold their error. GitHub and most
Markdown viewers draw a ```mermaid block (`.md`).

Every name and message is written on its line with its control characters as visible escapes
(a carriage return would end the line, and in Markdown the code fence, letting what follows be
read as HTML); the Markdown heading has `&`, `<` and `>` as entities."""

from __future__ import annotations

from html import escape

from ..core.visible import visible
from .picture import Box, Cluster, Picture, box_lines, cluster_lines, error_lines, figures

STYLES = {
    "attention": "fill:#ddeeff,stroke:#4a7fc1", "mlp": "fill:#dff5e3,stroke:#3c9a5f",
    "embedding": "fill:#fff1dc,stroke:#c98a2b", "merge": "fill:#f6e3ff,stroke:#9a5ac7",
    "norm": "fill:#eeeeee,stroke:#8c8c8c", "head": "fill:#dcf4f4,stroke:#2f9c9c",
    "io": "fill:#ffffff,stroke:#1f2328,stroke-width:2px",
    "skipped": "fill:#fafafa,stroke:#b0b7be,stroke-dasharray:3 3,color:#8c959f",
    "error": "fill:#ffebe9,stroke:#cf222e,stroke-width:2.5px,color:#cf222e",
}
CLASS_OF = {"attention": "attention", "mlp": "mlp", "patchify": "embedding", "embed": "embedding",
            "merge": "merge", "norm": "norm", "head": "head"}


def label(lines: list[str]) -> str:
    """A quoted Mermaid label: lines joined by <br/>, characters Mermaid reads escaped."""
    out = []
    for line in lines:
        line = visible(line)
        for char, code in (("#", "#35;"), ('"', "#34;"), ("<", "#60;"), (">", "#62;")):
            line = line.replace(char, code)
        out.append(line)
    return '"' + "<br/>".join(out) + '"'


class _Writer:
    def __init__(self, pic: Picture):
        self.pic = pic
        self.ids: dict[str, str] = {}
        self.lines: list[str] = ["flowchart TB"]
        self.classes: dict[str, list[str]] = {}

    def id_of(self, key: str) -> str:
        return self.ids.setdefault(key, f"n{len(self.ids)}")

    def write(self) -> str:
        pic = self.pic
        state = "checks" if pic.ok else f"{len(pic.errors)} error(s)"
        head = f"{pic.name}: {pic.summary}; {figures(pic.params, pic.flops)} in total, {state}"
        self.lines.append("  %% " + visible(head))
        for d in pic.unplaced:
            self.lines.append("  %% " + visible(d.text().replace("\n", " ")))
        self.children(pic.root, "  ")
        for edge in pic.edges:
            self.lines.append(f"  {self.id_of(edge.source)} -->|{label([edge.label])}| {self.id_of(edge.target)}")
        for name, style in STYLES.items():
            if self.classes.get(name):
                self.lines.append(f"  classDef {name} {style}")
                self.lines.append(f"  class {','.join(self.classes[name])} {name}")
        return "\n".join(self.lines) + "\n"

    def children(self, cluster: Cluster, indent: str) -> None:
        for child in cluster.children:
            if isinstance(child, Box):
                self.box(child, indent)
            else:
                head = cluster_lines(child) + [line for d in child.errors for line in error_lines(d)]
                self.lines.append(f"{indent}subgraph c_{self.id_of('cluster:' + child.key)}[{label(head)}]")
                self.lines.append(f"{indent}  direction TB")
                self.children(child, indent + "  ")
                self.lines.append(f"{indent}end")

    def box(self, box: Box, indent: str) -> None:
        node = self.id_of(box.key)
        text = label(box_lines(box) + [line for d in box.errors for line in error_lines(d)])
        shape = f"([{text}])" if box.role != "node" else f"[{text}]"
        self.lines.append(f"{indent}{node}{shape}")
        kind = ("error" if box.errors else "skipped" if box.skipped else "io" if box.role != "node"
                else CLASS_OF.get(box.op.split("/")[0]))
        if kind:
            self.classes.setdefault(kind, []).append(node)


def to_mermaid(pic: Picture) -> str:
    return _Writer(pic).write()


def to_markdown(pic: Picture) -> str:
    """The flowchart in a Markdown page: the name as its heading, the summary, the fenced block."""
    name, summary = (escape(visible(text), quote=False) for text in (pic.name, pic.summary))
    return f"# {name}\n\n{summary}\n\n```mermaid\n{to_mermaid(pic)}```\n"
