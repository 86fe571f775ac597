"""What a picture of a spec shows, before any format: boxes (nodes, inputs, outputs) nested in
clusters (blocks, inline groups, repeats), edges labelled with the tensor they carry, and the
errors of a spec that does not check, placed on the nodes they name.

Repeats are collapsed: a repeat whose copies are alike (the same nodes, ops and output shapes;
kinds may differ, as Swin's window/shifted pairs) is drawn once, `blocks ×6`, its figures
summed over the copies. A repeat whose copies differ (the stages of a pyramid) is drawn copy
by copy, each run of alike copies once (ConViT's ten GPSA blocks, `blocks.0-9 ×10`, then
blocks.10 and blocks.11). `expand=True` draws every copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import Diagnostic, SpecError
from ..core.ir import Graph, NodeView

MULTIPLY = "\u00d7"  # ×


@dataclass
class Box:
    key: str  # the path it is drawn for (a collapsed repeat's copies: the first copy's)
    name: str  # what it is called in its cluster: `attn`, an input's or an output's name
    op: str  # `attention/window`; `input`; `output`
    role: str  # "input", "node" or "output"
    type_text: str | None = None  # the output type: `[B, 3136, 96] 56x56`
    params: int | None = None  # per copy
    flops: int | None = None  # per copy
    copies: int = 1
    errors: list[Diagnostic] = field(default_factory=list)
    skipped: bool = False  # not checked: a node it reads failed
    ops: list[str] = field(default_factory=list)  # the ops of its copies (Swin: window, shifted)

    def __post_init__(self):
        self.ops = self.ops or [self.op]

    @property
    def op_text(self) -> str:
        """`attention/window | shifted` for copies of several kinds of one primitive."""
        first, *others = self.ops
        return " | ".join([first] + [o.split("/", 1)[-1] for o in others])


@dataclass
class Cluster:
    key: str
    title: str  # `stages.2`, `blocks ×6`
    note: str = ""  # `swin_block`: the block a use of it is drawn for
    children: list = field(default_factory=list)  # Boxes and Clusters, in the spec's order
    params: int = 0  # summed over every node inside (all copies)
    flops: int = 0
    costed: int = 0  # how many nodes inside have figures (0: none was checked)
    errors: list[Diagnostic] = field(default_factory=list)


@dataclass(frozen=True)
class Edge:
    source: str  # box keys
    target: str
    label: str


@dataclass
class Picture:
    name: str
    summary: str  # `image [B, 3, 224, 224] -> output [B, 1000]`
    root: Cluster
    edges: list[Edge]
    errors: list[Diagnostic]  # every error of the check (also those placed on boxes)
    unplaced: list[Diagnostic]  # errors that name no drawn node
    params: int = 0
    flops: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    def boxes(self) -> list[Box]:
        return [b for b in walk(self.root) if isinstance(b, Box)]

    def clusters(self) -> list[Cluster]:
        return [c for c in walk(self.root) if isinstance(c, Cluster) and c is not self.root]


def walk(item):
    yield item
    if isinstance(item, Cluster):
        for child in item.children:
            yield from walk(child)


def picture(graph: Graph | None, error: SpecError | None = None, expand: bool = False,
            name: str | None = None) -> Picture:
    """The picture of a checked spec (`graph`), or of one that failed (`error`, with the graph
    as far as it got, or None when it did not expand)."""
    errors = [d for d in (error.diagnostics if error else []) if d.severity == "error"]
    if graph is None:
        return Picture(name or "spec", "the spec did not expand: nothing to draw but its errors",
                       Cluster("", name or "spec"), [], errors, errors)
    return _Builder(graph, errors, expand).build()


class _Builder:
    def __init__(self, graph: Graph, errors: list[Diagnostic], expand: bool):
        self.graph, self.errors, self.expand = graph, errors, expand
        self.collapsed: dict[str, int] = {}  # repeat path -> copies, for the repeats drawn once
        self.runs: dict[str, dict[int, int]] = {}  # repeat path -> {first copy: copies} of its runs drawn once
        self.drawn: dict[str, str] = {}  # node path -> the key of the box that shows it
        self.clusters: dict[str, Cluster] = {}  # group path -> its cluster ("" the root)
        self.boxes: dict[str, Box] = {}  # box key -> box

    def build(self) -> Picture:
        graph = self.graph
        if not self.expand:
            self.find_collapsed()
        root = Cluster("", graph.name)
        self.clusters[""] = root
        for node in graph.nodes():
            self.place(node)
        outputs = self.add_outputs(root)
        edges = self.edges() + outputs
        unplaced = self.place_errors()
        for box in self.boxes.values():
            box.skipped = box.role == "node" and box.type_text is None and not box.errors
        self.sum_costs(root)
        return Picture(graph.name, self.summary(), root, edges, self.errors, unplaced, root.params, root.flops)

    # -- which repeats are drawn once ----------------------------------------------------------
    def find_collapsed(self) -> None:
        repeats = sorted((p for p, g in self.graph.groups.items() if g.kind == "repeat"), key=lambda p: p.count("."))
        members = self.members_by_copy()
        for path in repeats:
            canonical = self.canonical(path)
            if canonical != path:
                continue  # inside a copy that is not drawn
            copies = members.get(path, {})
            if len(copies) > 1 and self.alike([copies[i] for i in sorted(copies)], path):
                self.collapsed[path] = len(copies)
            elif len(copies) > 2:
                runs = self.alike_runs(copies, path)
                if runs:
                    self.runs[path] = runs

    def members_by_copy(self) -> dict[str, dict[int, list[str]]]:
        """repeat path -> copy index -> the node paths inside that copy."""
        repeats = {p for p, g in self.graph.groups.items() if g.kind == "repeat"}
        found: dict[str, dict[int, list[str]]] = {}
        for node in self.graph.nodes():
            parts = node.name.split(".")
            for i in range(1, len(parts)):
                prefix = ".".join(parts[:i])
                if prefix in repeats and parts[i].isdigit():
                    found.setdefault(prefix, {}).setdefault(int(parts[i]), []).append(node.name)
        return found

    def members_of(self, repeat: str) -> set[str]:
        """The copy indices of a repeat that hold nodes."""
        cut = len(repeat) + 1
        return {n.name[cut:].split(".")[0] for n in self.graph.nodes() if n.name.startswith(repeat + ".")}

    def alike(self, copies: list[list[str]], path: str) -> bool:
        first = self.signature(path, 0, copies[0])
        return all(self.signature(path, i, names) == first for i, names in enumerate(copies))

    def signature(self, path: str, copy_index: int, names: list[str]) -> list:
        """What must agree for two copies to be drawn as one: each node's path inside the copy,
        its primitive and its output type."""
        cut = len(path) + 2 + len(str(copy_index))
        return [(n[cut:], self.graph.node(n).op.primitive, self.type_text(self.graph.node(n))) for n in names]

    def alike_runs(self, copies: dict[int, list[str]], path: str) -> dict[int, int]:
        """{first copy: copies} of each run of two or more consecutive alike copies."""
        runs: dict[int, int] = {}
        start = previous = None
        for index in sorted(copies):
            same = (previous is not None and index == previous + 1
                    and self.signature(path, index, copies[index]) == self.signature(path, start, copies[start]))
            if same:
                runs[start] = runs.get(start, 1) + 1
            else:
                start = index
            previous = index
        return runs

    def run_start(self, repeat: str, index: int) -> int | None:
        """The first copy of the run drawn once that copy `index` of `repeat` belongs to."""
        for start, count in self.runs.get(repeat, {}).items():
            if start <= index < start + count:
                return start
        return None

    def run_title(self, repeat: str, start: int) -> str:
        """`blocks.0-9 ×10`: a run of copies drawn once."""
        count = self.runs[repeat][start]
        return f"{repeat}.{start}-{start + count - 1} {MULTIPLY}{count}"

    def canonical(self, path: str) -> str:
        """The key of what draws `path`: the copy index of every collapsed repeat made 0, and of
        a copy in a run drawn once, the run's first."""
        parts = path.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in self.collapsed and parts[i].isdigit():
                parts[i] = "0"
            elif prefix in self.runs and parts[i].isdigit():
                start = self.run_start(prefix, int(parts[i]))
                parts[i] = parts[i] if start is None else str(start)
        return ".".join(parts)

    # -- boxes and clusters ----------------------------------------------------------------------
    def place(self, node: NodeView) -> None:
        key = self.canonical(node.name)
        self.drawn[node.name] = key
        if node.is_input:
            box = Box(key, node.name, "input", "input", self.type_text(node))
            self.boxes[key] = box
            self.clusters[""].children.append(box)
            return
        if key in self.boxes:  # another copy of a collapsed repeat
            box = self.boxes[key]
            box.copies += 1
            if node.op.label not in box.ops:
                box.ops.append(node.op.label)
            return
        c = node.meta.get("cost")
        parent, name = self.home(key)
        box = Box(key, name, node.op.label, "node", self.type_text(node), c.params if c else None,
                  c.flops if c else None, skipped=node.type is None)
        self.boxes[key] = box
        parent.children.append(box)

    def home(self, key: str) -> tuple[Cluster, str]:
        """The cluster a node's box goes in, and the box's name there."""
        parent_key, _, last = key.rpartition(".")
        if parent_key in self.collapsed and last == "0":  # a repeated node drawn once: `blocks ×12`
            grand, _, repeat = parent_key.rpartition(".")
            return self.cluster_for(grand), f"{repeat} {MULTIPLY}{self.collapsed[parent_key]}"
        if last.isdigit() and int(last) in self.runs.get(parent_key, {}):  # a run of copies drawn once
            return self.cluster_for(parent_key), self.run_title(parent_key.rpartition(".")[2], int(last))
        if last.isdigit():
            last = f"{parent_key.rpartition('.')[2]}.{last}"
        return self.cluster_for(parent_key), last

    def cluster_for(self, key: str) -> Cluster:
        """The cluster drawn for the group at `key` (made with its parents on first use)."""
        if key in self.clusters:
            return self.clusters[key]
        parent_key, _, last = key.rpartition(".")
        info = self.graph.groups.get(key)
        note = info.block if info is not None and info.kind == "block" and info.block else ""
        if parent_key in self.collapsed and last == "0":  # the drawn copy of a collapsed repeat is its cluster
            cluster = self.cluster_for(parent_key)
            cluster.note = note or cluster.note
            self.clusters[key] = cluster
            return cluster
        parent = self.cluster_for(parent_key)
        title = f"{key} {MULTIPLY}{self.collapsed[key]}" if key in self.collapsed else key
        if last.isdigit() and int(last) in self.runs.get(parent_key, {}):
            title = self.run_title(parent_key, int(last))
        if info is not None and info.kind == "repeat" and key not in self.collapsed:
            copies = len(self.members_of(key))
            note = f"repeat, {copies} {'copy' if copies == 1 else 'copies'}"
        cluster = Cluster(key, title, note)
        parent.children.append(cluster)
        self.clusters[key] = cluster
        return cluster

    def add_outputs(self, root: Cluster) -> list[Edge]:
        edges = []
        for out in self.graph.outputs:
            key = f"output:{out.name}"
            source = self.graph.node(out.node)
            root.children.append(Box(key, out.name, "output", "output", self.type_text(source)))
            edges.append(Edge(self.drawn[out.node], key, self.type_text(source) or ""))
        return edges

    def edges(self) -> list[Edge]:
        found: dict[tuple, Edge] = {}
        for node in self.graph.nodes():
            for source in node.inputs:
                if self.between_copies(source, node.name):
                    continue
                a, b = self.drawn[source], self.drawn[node.name]
                if a != b and (a, b) not in found:
                    found[(a, b)] = Edge(a, b, self.type_text(self.graph.node(source)) or "")
        return list(found.values())

    def between_copies(self, source: str, target: str) -> bool:
        """Whether the edge joins two copies drawn as one (copy i -> copy i + 1 of a collapsed
        repeat, or of one run)."""
        a, b = source.split("."), target.split(".")
        for i in range(1, min(len(a), len(b))):
            if a[:i] != b[:i]:
                return False
            prefix = ".".join(a[:i])
            if prefix in self.collapsed and a[i] != b[i]:
                return True
            if prefix in self.runs and a[i] != b[i] and a[i].isdigit() and b[i].isdigit():
                start = self.run_start(prefix, int(a[i]))
                return start is not None and start == self.run_start(prefix, int(b[i]))
        return False

    # -- errors and figures -----------------------------------------------------------------------
    def place_errors(self) -> list[Diagnostic]:
        unplaced = []
        for diag in self.errors:
            key = self.drawn.get(diag.path or "")
            if key is not None and key in self.boxes:
                self.boxes[key].errors.append(diag)
            elif diag.path and self.canonical(diag.path) in self.clusters:
                self.clusters[self.canonical(diag.path)].errors.append(diag)
            else:
                unplaced.append(diag)
        return unplaced

    def sum_costs(self, root: Cluster) -> None:
        for node in self.graph.nodes():
            c = node.meta.get("cost")
            if node.is_input or c is None:
                continue
            key = self.drawn[node.name]
            seen = set()
            for prefix in _prefixes(key):
                cluster = self.clusters.get(prefix)
                if cluster is not None and id(cluster) not in seen:
                    seen.add(id(cluster))
                    cluster.params += c.params
                    cluster.flops += c.flops
                    cluster.costed += 1

    def summary(self) -> str:
        ins = ", ".join(f"{n.name} {self.type_text(n)}" for n in self.graph.inputs())
        outs = ", ".join(f"{o.name} {self.type_text(self.graph.node(o.node)) or '?'}" for o in self.graph.outputs)
        return f"{ins} -> {outs}"

    @staticmethod
    def type_text(node: NodeView) -> str | None:
        t = node.meta.get("type")
        return t.describe() if t is not None else None


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [""] + [".".join(parts[:i]) for i in range(1, len(parts))]


# -- text, shared by every format --------------------------------------------------------------
def short(n: int | None) -> str:
    """4.72M, 37.9K, 512: a count in a few characters."""
    if n is None:
        return "?"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.2f}{unit}" if value < 10 else f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return str(n)


def figures(params: int | None, flops: int | None) -> str:
    return f"{short(params)} params \u00b7 {short(flops)} FLOPs"


def box_lines(box: Box) -> list[str]:
    """The lines a box shows: its name, op, and type or figures (errors are drawn apart)."""
    if box.role != "node":
        return [box.name, box.role, box.type_text or "?"]
    lines = [box.name, box.op_text]
    if box.skipped:
        lines.append("not checked: what it reads failed")
    elif not box.errors:
        each = " each" if box.copies > 1 else ""
        lines.append(figures(box.params, box.flops) + each)
    return lines


def cluster_lines(cluster: Cluster) -> list[str]:
    title = cluster.title + (f" \u00b7 {cluster.note}" if cluster.note else "")
    if any(isinstance(b, Box) and b.errors for b in walk(cluster)):
        return [title, "failed: see the red node"]
    if not cluster.costed:
        return [title, "not checked"]
    return [title, figures(cluster.params, cluster.flops)]


def error_lines(diagnostic: Diagnostic, width: int = 64) -> list[str]:
    """An error as short lines: where, what, and the hint."""
    import textwrap

    where = f"line {diagnostic.loc.line}: " if diagnostic.loc else ""
    lines = textwrap.wrap(f"error: {where}{diagnostic.message}", width)
    if diagnostic.hint:
        lines += textwrap.wrap(f"hint: {diagnostic.hint}", width)
    return lines
