"""The module tree is the call tree: every repeat, repetition, block use and inline group of
the spec (a path that holds nodes without being one, `graph.groups`) becomes an nn.Module
whose forward computes exactly that part, and its parent's graph calls it.

    model.blocks            Stack (a GraphModule you can index: model.blocks[0])
    model.blocks[0]         Group, a GraphModule: attn = self.attn(x); mlp = self.mlp(attn); return mlp
    model.blocks[0].attn    the sub-layer module (norm, body, residual in its own forward)

A group's inputs are the values its nodes read from outside it, in first-use order (a
block's are its declared inputs); its outputs are the values read outside it, or returned by
the model. Parameter names do not change: the modules sit at their nodes' dotted paths.

Siblings that read each other's outputs both ways (possible with forward `from:` references)
cannot be called one after the other; such groups are dissolved into their parent (their
nodes are called directly), which keeps the computation exact.
"""

from __future__ import annotations

import copy
import heapq
import operator

import torch
import torch.fx
import torch.nn as nn
import torch.utils.checkpoint

from archspec.core.ir import Graph
from archspec.language.names import OBJECTIVES


class Group(torch.fx.GraphModule):
    """A part of the model (a block use, a repetition, an inline group) as one module. With
    `checkpointing` (model.set_grad_checkpointing), its activations are recomputed in the
    backward pass instead of kept (torch.utils.checkpoint, non-reentrant)."""

    checkpointing = False

    def __call__(self, *args, **kwargs):
        if self.checkpointing and self.training and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(super().__call__, *args, use_reentrant=False, **kwargs)
        return super().__call__(*args, **kwargs)


class Stack(torch.fx.GraphModule):
    """A repeat: its repetitions are its children 0, 1, ...; indexable like nn.ModuleList
    (model.blocks[0], len(model.blocks), iterating)."""

    def __getitem__(self, index: int) -> nn.Module:
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"repetition {index} of {count}")
        return getattr(self, str(index % count))

    def __len__(self) -> int:
        return sum(1 for name, _ in self.named_children() if name.isdigit())

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy that keeps the class names of the model and its groups (VitB16, Blocks, ...):
    GraphModule's own deepcopy renames every copied GraphModule "GraphModule", and model.py and
    the pictures read the names back."""
    copied = copy.deepcopy(model)
    for (_, original), (_, twin) in zip(model.named_modules(remove_duplicate=False),
                                        copied.named_modules(remove_duplicate=False)):
        if isinstance(original, torch.fx.GraphModule) and type(twin) is not type(original):
            type(twin).__name__ = type(original).__name__  # each GraphModule has a class of its own
    return copied


class Unit:
    """A direct child of a group: one IR node, or a subgroup (by its path). `target` is its
    path relative to the group (one segment, unless a group between them was dissolved)."""

    def __init__(self, path: str, target: str, nodes: list[str], is_group: bool, rank: int):
        self.path, self.target, self.nodes, self.is_group, self.rank = path, target, nodes, is_group, rank


class Hierarchy:
    """Builds the group modules of a lowered model, deepest first, in place in `root`."""

    def __init__(self, graph: Graph, root: nn.Module, mark):
        self.graph, self.root, self.mark = graph, root, mark  # mark(fx_node, ir_name): meta and stack trace
        self.rank = {name: i for i, name in enumerate(graph.order())}
        self.needed_outside = {o.node for o in graph.outputs + graph.objectives}
        # what forward computes: the nodes an output depends on; a node none does keeps its module and
        # parameters (a reference's unused pooler loads), and is not called
        self.live = graph.ancestors(list(self.needed_outside))

    # -- what a group holds -----------------------------------------------------------------------
    def members(self, prefix: str) -> list[str]:
        """IR nodes (not inputs) under `prefix` ('' for the whole network), in call order."""
        names = [n for n in self.rank if n in self.live and not self.graph.record(n).is_input
                 and self.under(n, prefix) and not n.startswith(OBJECTIVES + ".")]
        return sorted(names, key=self.rank.__getitem__)

    @staticmethod
    def under(name: str, prefix: str) -> bool:
        return not prefix or name.startswith(prefix + ".")

    def units(self, prefix: str, members: list[str], dissolved: set[str]) -> list[Unit]:
        """The direct children of a group: its own nodes, and one unit per child group."""
        units: dict[str, Unit] = {}
        depth = len(prefix.split(".")) if prefix else 0
        for name in members:
            parts = name.split(".")
            path = ".".join(parts[: depth + 1])
            while path in dissolved:  # a dissolved group's children belong to this one
                depth_here = len(path.split(".")) + 1
                path = ".".join(parts[:depth_here])
            is_group = path != name
            target = path[len(prefix) + 1:] if prefix else path
            unit = units.setdefault(path, Unit(path, target, [], is_group, self.rank[name]))
            unit.nodes.append(name)
        return list(units.values())

    def boundary(self, nodes: list[str]) -> tuple[list[str], list[str]]:
        """(inputs, outputs) of a set of nodes: values read from outside, in first-use order;
        values read outside or returned, in call order."""
        inside = set(nodes)
        inputs: list[str] = []
        for name in nodes:
            for source in self.graph.inputs_of(name):
                if source not in inside and source not in inputs:
                    inputs.append(source)
        outputs = [n for n in nodes if n in self.needed_outside
                   or any(r not in inside for r in self.graph.readers(n))]
        return inputs, outputs

    # -- building -----------------------------------------------------------------------------------
    def build(self, prefix: str, dissolved: set[str] | None = None, force=None):
        """The fx graph of the group at `prefix` (its subgroups built and installed first),
        with its inputs and outputs; `force` gives the root's own (the model's inputs in
        declared order, its outputs as declared) and returns the graph alone."""
        dissolved = set(dissolved or ())
        members = self.members(prefix)
        while True:
            units = self.units(prefix, members, dissolved)
            order = self.call_order(units)
            if order is not None:
                break
            dissolved |= {u.path for u in units if u.is_group}  # siblings that feed each other: call their nodes
        inputs, outputs = force if force is not None else self.boundary(members)
        info = self.graph.groups.get(prefix)
        if info is not None and info.kind == "block" and set(inputs) == set(info.sources):
            inputs = [s for s in dict.fromkeys(info.sources)]  # a block takes its declared inputs, in their order
        # (a block that reads none or only some of them, a generator of constants, takes what it reads: its
        # caller need not hold the others)
        fx = torch.fx.Graph()
        env = {name: fx.placeholder(name if force is not None else self.placeholder_name(i, name, info))
               for i, name in enumerate(inputs)}
        for unit in order:
            if unit.is_group:
                self.call_group(fx, env, unit, dissolved)
            else:
                (name,) = unit.nodes
                call = fx.call_module(unit.target, tuple(env[s] for s in self.graph.inputs_of(name)))
                env[name] = self.mark(call, name)
        result = [env[o] for o in outputs]
        fx.output(result[0] if len(result) == 1 else tuple(result))
        return fx if force is not None else (fx, inputs, outputs)

    def call_group(self, fx: torch.fx.Graph, env: dict, unit: Unit, dissolved: set[str]) -> None:
        graph, inputs, outputs = self.build(unit.path, {d for d in dissolved if d.startswith(unit.path + ".")})
        self.install(unit.path, graph)
        call = fx.call_module(unit.target, tuple(env[s] for s in inputs))
        call.meta["archspec_group"] = unit.path
        if len(outputs) == 1:
            env[outputs[0]] = call
            return
        for i, name in enumerate(outputs):
            env[name] = fx.call_function(operator.getitem, (call, i))

    def install(self, path: str, graph: torch.fx.Graph) -> None:
        """Replace the plain container at `path` by a Group (or Stack) module computing it."""
        parent_path, _, name = path.rpartition(".")
        parent = self.root.get_submodule(parent_path) if parent_path else self.root
        container = getattr(parent, name)
        info = self.graph.groups.get(path)
        cls = Stack if info is not None and info.kind == "repeat" else Group
        module = cls(container, graph, class_name=self.class_name(path, info))
        setattr(parent, name, module)

    def call_order(self, units: list[Unit]) -> list[Unit] | None:
        """Units in an order where each comes after those it reads (the spec's order where it
        can); None when units read each other both ways."""
        owner = {n: u for u in units for n in u.nodes}
        needs = {u.path: set() for u in units}
        for unit in units:
            for name in unit.nodes:
                for source in self.graph.inputs_of(name):
                    if source in owner and owner[source] is not unit:
                        needs[unit.path].add(owner[source].path)
        readers = {u.path: [] for u in units}
        for path, sources in needs.items():
            for source in sources:
                readers[source].append(path)
        by_path = {u.path: u for u in units}
        waiting = {path: len(sources) for path, sources in needs.items()}
        ready = [(by_path[p].rank, p) for p, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, path = heapq.heappop(ready)
            order.append(by_path[path])
            for reader in readers[path]:
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    heapq.heappush(ready, (by_path[reader].rank, reader))
        return order if len(order) == len(units) else None

    # -- names ----------------------------------------------------------------------------------------
    @staticmethod
    def placeholder_name(index: int, source: str, info) -> str:
        if info is not None and info.kind == "block" and index < len(info.inputs):
            return info.inputs[index]
        return "x" if index == 0 else source.replace(".", "_")

    @staticmethod
    def class_name(path: str, info) -> str:
        if info is not None and info.block:
            base = info.block
        else:
            base = "_".join(p for p in path.split(".") if not p.isdigit())
        return "".join(part.capitalize() for part in base.split("_") if part) or "Group"
