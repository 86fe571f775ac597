"""The result of `archspec check`: per-node shapes and costs, totals, as a table or JSON.

FLOPs are per sample (batch 1), with every symbolic length at its largest; the totals say at
which lengths (`per sample at L=1024`), since a sequence model's FLOPs grow with its length."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .core.errors import Diagnostic
from .core.ir import Graph
from .core.types import BATCH, Sym, TensorType
from .primitives.kv_cache import cached_layers, cross_layers, recent_layers, without_cache
from .primitives.kv_cache import line as kv_cache_line, summary as kv_cache_summary
from .primitives.cost import totals


def shape_list(t: TensorType) -> list:
    return [d if isinstance(d, int) else str(d) for d in t.shape]


@dataclass
class NodeRow:
    path: str
    op: str
    shape: str
    params: int
    flops: int
    activation_bytes: int
    buffer_bytes: int = 0
    score_bytes: int = 0
    record: dict = field(repr=False, default_factory=dict)
    run: bool = True  # forward calls it: an output depends on it (else its FLOPs are not in the total)


@dataclass
class Report:
    name: str
    file: str | None
    inputs: dict[str, TensorType]
    outputs: dict[str, TensorType]
    params: int
    flops: int
    nodes: list[NodeRow]
    graph: Graph = field(repr=False)
    warnings: list[Diagnostic] = field(default_factory=list)

    @classmethod
    def from_graph(cls, graph: Graph) -> "Report":
        rows = []
        varies = varying_options(graph)
        live = graph.ancestors([o.node for o in graph.outputs + graph.objectives])
        for node in graph.nodes():
            if node.is_input:
                continue
            c = node.meta["cost"]
            record = {"path": node.name, "op": node.op.primitive, "kind": node.op.kind,
                      "shape": shape_list(node.type), "layout": node.type.layout,
                      "grid": list(node.type.grid) if node.type.grid else None,
                      "params": c.params, "flops": c.flops, "activation_bytes": c.activation_bytes,
                      "buffer_bytes": c.buffer_bytes, "score_bytes": c.score_bytes, "shared_with": c.shared_with,
                      "line": node.loc.line if node.loc else None, "varies": varies.get(node.name, {}),
                      "run": node.name in live}
            op = " ".join([node.op.label] + [f"{k}={short(v)}" for k, v in varies.get(node.name, {}).items()])
            rows.append(NodeRow(node.name, op, node.type.describe(), c.params, c.flops,
                                c.activation_bytes, c.buffer_bytes, c.score_bytes, record, node.name in live))
        total = totals(graph)
        inputs = {n.name: n.type for n in graph.inputs()}
        outputs = {o.name: graph.type_of(o.node) for o in graph.outputs}
        return cls(graph.name, graph.file, inputs, outputs, total.params, total.flops, rows, graph,
                   list(graph.warnings))

    @property
    def flops_at(self) -> dict[str, int]:
        """The symbolic lengths the FLOPs are counted at (each at its largest), by name: those an
        input's shape has (a dim declared and not used, inherited from the spec a fixed-length one
        extends, counts nothing)."""
        used = {size.name for t in self.inputs.values() for size in t.shape if isinstance(size, Sym)}
        return {name: sym.hi for name, sym in self.graph.dims.items() if name != BATCH.name and name in used}

    @property
    def flops_basis(self) -> str:
        """What the FLOPs are counted for: `per sample`, and at which lengths for a sequence model."""
        lengths = ", ".join(f"{name}={size}" for name, size in self.flops_at.items())
        return f"per sample at {lengths}" if lengths else "per sample"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": {k: shape_list(t) for k, t in self.inputs.items()},
            "outputs": {k: shape_list(t) for k, t in self.outputs.items()},
            "params": self.params,
            "flops": self.flops,
            "flops_convention": f"{self.flops_basis} (batch 1); multiply-add = 2; matmul, conv and attention only",
            "flops_at": self.flops_at,
            "nodes": [row.record for row in self.nodes],
            "warnings": [w.record() for w in self.warnings],
            # generate's cache (and an encoder-decoder's source cache), or None
            "kv_cache": kv_cache_summary(cached_layers(self.graph), cross_layers(self.graph),
                                         recent_layers(self.graph)),
            "decodes_without_cache": without_cache(self.graph),  # why generate() runs whole sequences, or None
        }

    def table(self) -> str:
        head = ("node", "op", "output", "params", "FLOPs")
        body = [(r.path, r.op, r.shape, f"{r.params:,}", human(r.flops) if r.run else "not run") for r in self.nodes]
        widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
        align = ["<", "<", "<", ">", ">"]

        def line(row):
            return "  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, align, widths)).rstrip()

        ins = ", ".join(f"{k} {t.describe()}" for k, t in self.inputs.items())
        outs = ", ".join(f"{k} {t.describe()}" for k, t in self.outputs.items())
        rule = "-" * len(line(head))
        cache = kv_cache_line(cached_layers(self.graph), cross_layers(self.graph), recent_layers(self.graph))
        uncached = without_cache(self.graph)
        if uncached is not None:
            cache = (f"KV cache (generate): none, {uncached}: each new token runs the whole sequence so far "
                     "(slower as it grows; no compile, no padded prompts)")
        return "\n".join([f"{self.name}: {ins} -> {outs}", line(head), rule, *map(line, body), rule,
                          f"total: {self.params:,} params, {human(self.flops)}FLOPs {self.flops_basis} "
                          "(multiply-add = 2; matmul, conv and attention)", *([cache] if cache else [])])


QUIET_OPTIONS = ("drop_path", "kind")  # drop_path varies by layer in vision specs; the label shows the kind
MOST_SHOWN = 3


def varying_options(graph: Graph) -> dict[str, dict]:
    """For each node among the copies of one node (the innermost repeat's: the same path but for
    the last copy number, the same op and kind), the options whose values differ among the copies, with this
    node's value (the SmolLM3 trial: the layers without rotary looked like the others in
    check); at most MOST_SHOWN, the options every copy has."""
    groups: dict[tuple, list] = {}
    for node in graph.nodes():
        if not node.is_input and node.params is not None:
            parts = node.name.split(".")
            last = max((i for i, part in enumerate(parts) if part.isdigit()), default=None)  # the innermost repeat
            template = ".".join("#" if i == last else part for i, part in enumerate(parts))
            groups.setdefault((template, node.op.label), []).append(node)
    found = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        values = [m.params.model_dump() for m in members]
        common = [k for k in values[0] if all(k in v for v in values) and k not in QUIET_OPTIONS]
        differ = [k for k in common if any(v[k] != values[0][k] for v in values)][:MOST_SHOWN]
        for member, value in zip(members, values):
            if differ:
                found[member.name] = {k: value[k] for k in differ}
    return found


def short(value) -> str:
    """An option's value in a few characters: none, true, 16, 1e-05, [1, 0, ...]."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 16 else text[:13] + "..."


def human(n: int) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} "
