"""The IR: a networkx DiGraph whose nodes carry a small frozen record.

A record has a unique dotted path (its name), the op, validated params, ordered inputs,
source positions and, once `infer` has run, the output tensor type. Passes never mutate a
record; they replace it. `Graph.lint` checks the invariants between passes (torch.fx's
Graph.lint is the model): a lint failure is a bug in archspec, never the user's fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

import networkx as nx

from archspec.diagnostics import Loc

from .types import Sym, TensorType

INPUT = "input"  # op of a graph input
_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")


@dataclass(frozen=True)
class Node:
    name: str  # dotted path: stages.2.blocks.1.attn
    op: str
    params: Any  # a frozen pydantic model; None for graph inputs
    inputs: tuple[str, ...] = ()
    loc: Loc | None = None
    param_locs: Mapping[str, Loc] = field(default_factory=dict, compare=False)
    from_loc: Loc | None = None
    type: TensorType | None = None

    def param_loc(self, name: str | None) -> Loc | None:
        """Where a parameter was written (its value), else where the node was. `from` names
        the node's `from:` (for rules about a second input, e.g. cross attention's memory)."""
        if name == "from" and self.from_loc is not None:
            return self.from_loc
        if name and name in self.param_locs:
            return self.param_locs[name]
        return self.loc


@dataclass(frozen=True)
class Output:
    name: str  # the output's name in the compiled module
    node: str  # the node it reads
    loc: Loc | None = None


class Graph:
    def __init__(self, name: str, doc: str = "", file: str | None = None):
        self.name = name
        self.doc = doc
        self.file = file
        self.nx = nx.DiGraph()
        self.outputs: list[Output] = []
        self.dims: dict[str, Sym] = {}
        self._order: dict[str, int] = {}

    # -- building ----------------------------------------------------------------------
    def add(self, node: Node) -> None:
        if node.name in self._order:
            raise RuntimeError(f"IR: duplicate node {node.name}")
        self._order[node.name] = len(self._order)
        self.nx.add_node(node.name, node=node)
        for source in node.inputs:
            self.nx.add_edge(source, node.name)

    def replace(self, node: Node) -> None:
        """Swap in a new record for an existing node (same name and inputs)."""
        old = self.node(node.name)
        if old.inputs != node.inputs:
            raise RuntimeError(f"IR: replace changed the inputs of {node.name}")
        self.nx.nodes[node.name]["node"] = node

    def set_type(self, name: str, tensor_type: TensorType) -> None:
        self.replace(replace(self.node(name), type=tensor_type))

    # -- reading -----------------------------------------------------------------------
    def node(self, name: str) -> Node:
        return self.nx.nodes[name]["node"]

    def __contains__(self, name: str) -> bool:
        return name in self.nx

    def __len__(self) -> int:
        return len(self._order)

    def nodes(self) -> Iterator[Node]:
        """Nodes in a topological order that keeps the spec's order where it can."""
        for name in nx.lexicographical_topological_sort(self.nx, key=self._order.__getitem__):
            yield self.node(name)

    def inputs(self) -> list[Node]:
        return [n for n in self.nodes() if n.op == INPUT]

    def meta(self, name: str) -> dict:
        """Per-node results of later passes (cost, ...), beside the record."""
        return self.nx.nodes[name]

    # -- invariants --------------------------------------------------------------------
    def lint(self, inferred: bool = False) -> None:
        problems = []
        names = set(self._order)
        for node in (self.node(n) for n in self._order):
            if not all(_SEGMENT.fullmatch(s) for s in node.name.split(".")):
                problems.append(f"bad path {node.name!r}")
            for source in node.inputs:
                if source not in names:
                    problems.append(f"{node.name} reads missing node {source}")
            if set(self.nx.predecessors(node.name)) != set(node.inputs):
                problems.append(f"{node.name}: edges differ from inputs")
            if (node.op == INPUT) != (node.params is None):
                problems.append(f"{node.name}: only inputs have no params")
            if inferred and node.type is None:
                problems.append(f"{node.name} has no type after infer")
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts)):
                if ".".join(parts[:i]) in names:
                    problems.append(f"path {name} lies inside node {'.'.join(parts[:i])}")
        if not nx.is_directed_acyclic_graph(self.nx):
            problems.append("graph has a cycle")
        for out in self.outputs:
            if out.node not in names:
                problems.append(f"output {out.name} reads missing node {out.node}")
        if problems:
            raise RuntimeError("IR lint failed (a bug in archspec):\n  " + "\n  ".join(problems))
