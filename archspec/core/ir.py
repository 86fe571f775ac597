"""The IR: nodes that carry a small frozen record and a `meta` dict, and the edges between them.

- The record (`Node`): the unique dotted path (its name), the op (a primitive kind object, or
  `INPUT` for a graph input), validated params and source positions. Passes never change it.
- The edges: each node's ordered inputs (slot 0, 1, ...) are the one store of what it reads;
  who reads a node is derived from them. `to_networkx()` gives the same graph as a networkx
  MultiDiGraph for analyses that earn the import (a cycle's path in an error, `archspec graph`);
  the check path walks the graph itself, since importing networkx alone takes about 0.13 s
  of `archspec check`'s 0.3 s.
- `meta`: what passes found out about the node (`type` from shape inference, `cost` from the
  cost pass), written by the interpreter (core/interpreter.py).

`graph.node(name)` gives a read-only view joining the three: `.inputs`, `.type`, `.meta`
beside the record's fields. `Graph.lint` checks the invariants between passes (torch.fx's
Graph.lint is the model): a lint failure is a bug in archspec, never the user's fault.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from .errors import Diagnostic, Loc, bug
from .types import Sym, TensorType

_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")


class _Input:
    """The op of a graph input."""

    name = "input"
    label = "input"

    def __repr__(self) -> str:
        return "INPUT"


INPUT = _Input()


def nearest_loc(param_locs: Mapping[str, Loc], name: str) -> Loc | None:
    """Where the dotted option `name` was written (`scores.0.softcap.capp`), else the nearest
    option that holds it (a list of names is located as a whole); None when none is."""
    while name:
        if name in param_locs:
            return param_locs[name]
        name = name.rpartition(".")[0]
    return None


@dataclass(frozen=True)
class Node:
    name: str  # dotted path: stages.2.blocks.1.attn
    op: Any  # a primitive kind (archspec.primitives.base.Op), or INPUT
    params: Any  # a frozen declared model (core/declared.py); None for graph inputs
    loc: Loc | None = None
    param_locs: Mapping[str, Loc] = field(default_factory=dict, compare=False)
    from_loc: Loc | None = None

    @property
    def is_input(self) -> bool:
        return self.op is INPUT

    def param_loc(self, name: str | None) -> Loc | None:
        """Where a parameter was written (its value; a dotted name, an option inside one), else
        where the node was. `from` names the node's `from:` (for rules about a second input,
        e.g. cross attention's memory)."""
        if name == "from" and self.from_loc is not None:
            return self.from_loc
        found = nearest_loc(self.param_locs, name) if name else None
        return found if found is not None else self.loc


class NodeView:
    """A node as passes see it: the record's fields plus its inputs (from the edges), its
    meta, and the type shape inference gave it (meta["type"])."""

    __slots__ = ("graph", "record")

    def __init__(self, graph: "Graph", record: Node):
        self.graph, self.record = graph, record

    def __getattr__(self, name: str):
        return getattr(self.record, name)

    def __repr__(self) -> str:
        return f"NodeView({self.record.name!r})"

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.graph.inputs_of(self.record.name)

    @property
    def meta(self) -> dict:
        return self.graph.meta(self.record.name)

    @property
    def type(self) -> TensorType | None:
        return self.meta.get("type")


@dataclass(frozen=True)
class GroupInfo:
    """What made a path that holds nodes without being one: a repeat (its copies are the
    members 0, 1, ...), a use of a block (`block` names it; `inputs` are the names its graph
    reads its inputs by), or an inline `graph:` group. Lowering makes each an nn.Module."""

    kind: str  # "repeat", "block" or "group"
    block: str | None = None
    inputs: tuple[str, ...] = ()  # a block's input names
    sources: tuple[str, ...] = ()  # the nodes a block's inputs read, in the same order


@dataclass(frozen=True)
class BlockUse:
    """A use of a block: which block, and where the use writes each argument it gives (an
    error about `${heads}` inside the block points there: language/given.py)."""

    block: str
    given: tuple[tuple[str, Loc], ...] = ()  # (argument, where its value is written)


@dataclass(frozen=True)
class Output:
    name: str  # the output's name in the compiled module
    node: str  # the node it reads
    loc: Loc | None = None


# The methods of a model's outputs read by name (compiler/model.py's ModelOutput, a tuple): an
# output of one of these names is out["keys"], never out.keys (a check warning says so).
OUTPUT_METHODS = ("keys", "values", "items", "to_tuple", "count", "index")


class Graph:
    def __init__(self, name: str, doc: str = "", file: str | None = None):
        self.name = name
        self.doc = doc
        self.file = file
        self.outputs: list[Output] = []
        self.dims: dict[str, Sym] = {}
        self.objectives: list[Output] = []  # training losses (model.loss), not part of forward
        self.mappings: list[str] = []  # weight mapping files the spec names (absolute paths)
        self.mapping_sources: list = []  # `mappings:` entries as resolved (language/mapping_sources.py)
        self.params: dict = {}  # the spec's params as checked (after --set), for mapping files' ${...}
        self.groups: dict[str, GroupInfo] = {}  # paths of repeats, block uses and inline groups
        self.block_uses: dict[str, BlockUse] = {}  # path of each block use -> where it gives its arguments
        self.warnings: list[Diagnostic] = []  # found while making the IR (e.g. nodes no output needs)
        self._targets: set[str] = set()  # inputs that are training targets (only objectives read them)
        self._records: dict[str, Node] = {}  # in the order nodes were added (the spec's order)
        self._inputs: dict[str, tuple[str, ...]] = {}  # the edges: what each node reads, by slot
        self._meta: dict[str, dict] = {}
        self._readers: dict[str, list[str]] | None = None  # derived from _inputs, rebuilt on demand

    # -- building ----------------------------------------------------------------------
    def add(self, node: Node, inputs: Sequence[str] = (), type: TensorType | None = None,
            target: bool = False) -> None:
        if node.name in self._records:
            raise bug(f"IR: duplicate node {node.name}")
        if target:
            self._targets.add(node.name)
        self._records[node.name] = node
        self._inputs[node.name] = tuple(inputs)
        self._meta[node.name] = {} if type is None else {"type": type}
        self._readers = None

    # -- reading -----------------------------------------------------------------------
    def node(self, name: str) -> NodeView:
        return NodeView(self, self._records[name])

    def record(self, name: str) -> Node:
        return self._records[name]

    def inputs_of(self, name: str) -> tuple[str, ...]:
        """What the node reads, in slot order."""
        return self._inputs[name]

    def readers(self, name: str) -> list[str]:
        """The nodes that read `name` (each once, in the order they were added)."""
        if self._readers is None:
            self._readers = {n: [] for n in self._records}
            for reader, sources in self._inputs.items():
                for source in dict.fromkeys(sources):
                    self._readers.setdefault(source, []).append(reader)
        return self._readers.get(name, [])

    def meta(self, name: str) -> dict:
        """Per-node results of the passes (type, cost, ...), beside the record."""
        return self._meta[name]

    def type_of(self, name: str) -> TensorType:
        return self._meta[name]["type"]

    def __contains__(self, name: str) -> bool:
        return name in self._records

    def __len__(self) -> int:
        return len(self._records)

    def order(self) -> list[str] | None:
        """Names in a topological order that keeps the spec's order where it can (the smallest
        ready node first, as networkx's lexicographical_topological_sort); None if there is a cycle."""
        rank = {name: i for i, name in enumerate(self._records)}
        waiting = {name: sum(1 for s in sources if s in rank) for name, sources in self._inputs.items()}
        ready = [(rank[n], n) for n, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, name = heapq.heappop(ready)
            order.append(name)
            for reader in self.readers(name):
                waiting[reader] -= self._inputs[reader].count(name)
                if waiting[reader] == 0:
                    heapq.heappush(ready, (rank[reader], reader))
        return order if len(order) == len(self._records) else None

    def nodes(self) -> Iterator[NodeView]:
        order = self.order()
        if order is None:
            raise bug("IR: the graph has a cycle")
        for name in order:
            yield self.node(name)

    def inputs(self) -> list[NodeView]:
        """The model's inputs (what forward takes), in the order the spec declares them."""
        return [self.node(n) for n, record in self._records.items() if record.is_input and n not in self._targets]

    def target_names(self) -> set[str]:
        return set(self._targets)

    def targets(self) -> list[NodeView]:
        """The training targets (what model.loss takes after the inputs), in the spec's order."""
        return [self.node(n) for n in self._records if n in self._targets]

    def forward_nodes(self) -> set[str]:
        """The nodes forward computes: what the outputs depend on (objectives excluded)."""
        return self.ancestors([o.node for o in self.outputs])

    def ancestors(self, names: Sequence[str]) -> set[str]:
        """The nodes `names` depend on, themselves included."""
        seen, stack = set(), list(names)
        while stack:
            name = stack.pop()
            if name not in seen:
                seen.add(name)
                stack.extend(self._inputs.get(name, ()))
        return seen

    def to_networkx(self):
        """The graph as a networkx MultiDiGraph (edges keyed by slot; nodes carry `node` and `meta`)."""
        import networkx as nx

        g = nx.MultiDiGraph()
        for name, record in self._records.items():
            g.add_node(name, node=record, meta=self._meta[name])
        for name, sources in self._inputs.items():
            for slot, source in enumerate(sources):
                g.add_edge(source, name, key=slot)
        return g

    # -- invariants --------------------------------------------------------------------
    def lint(self, inferred: bool = False) -> None:
        problems = []
        for name, node in self._records.items():
            if not all(_SEGMENT.fullmatch(s) for s in name.split(".")):
                problems.append(f"bad path {name!r}")
            for source in self._inputs[name]:
                if source not in self._records:
                    problems.append(f"{name} reads missing node {source}")
            if node.is_input != (node.params is None):
                problems.append(f"{name}: only inputs have no params")
            if node.is_input and self._inputs[name]:
                problems.append(f"{name}: an input reads nothing")
            if inferred and self._meta[name].get("type") is None:
                problems.append(f"{name} has no type after infer")
        for name in self._records:
            parts = name.split(".")
            for i in range(1, len(parts)):
                if ".".join(parts[:i]) in self._records:
                    problems.append(f"path {name} lies inside node {'.'.join(parts[:i])}")
        if not problems and self.order() is None:
            problems.append("graph has a cycle")
        for out in self.outputs + self.objectives:
            if out.node not in self._records:
                problems.append(f"output {out.name} reads missing node {out.node}")
        if problems:
            raise bug("IR lint failed (a bug in archspec):\n  " + "\n  ".join(problems))
