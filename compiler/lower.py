"""lower: IR -> torch.fx.GraphModule.

A pass of the IR interpreter builds every node's module with its lowering rule
(lowering_rules.py; one rule per op, in compiler/modules/) and installs it at the node's dotted
path; a sub-layer's module holds its norm and residual. hierarchy.py then turns every repeat,
repetition, block use and inline group into a module whose forward computes that part, so the
module tree is the call tree. The root is an `ArchspecModel` (model.py), a GraphModule.

Every call of a node's module records the node (`meta["archspec_node"]`) and a stack trace
pointing at the spec's file:line, which torch's exporters repeat in their errors. The same
seed gives the same weights.
"""

from __future__ import annotations

import operator
import re

import torch
import torch.fx
import torch.nn as nn

from archspec.core.errors import InternalError, Loc, bug, error
from archspec.core.memory import MAX_BUILD_BYTES, ran_out_of_memory
from archspec.core.interpreter import Interpreter
from archspec.core.ir import Graph, NodeView

from archspec.language.names import OBJECTIVES

from .hierarchy import Hierarchy
from .interface import model_facts
from .lowering_rules import LoweringContext, rule_for
from .model import ArchspecModel, input_shapes
from .pretrained import spec_record


def class_name(spec_name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", spec_name) if part) or "Model"


def install(root: nn.Module, path: str, module: nn.Module) -> None:
    """Place `module` at a dotted path, creating empty parents."""
    *parents, leaf = path.split(".")
    for part in parents:
        if not hasattr(root, part):
            root.add_module(part, nn.Module())
        root = getattr(root, part)
    root.add_module(leaf, module)


class Lowering(Interpreter):
    """Builds each node's module and installs it: the network's under `root`, the losses of
    the objectives under `objective_root` (they have no parameters and are not part of forward)."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.root = nn.Module()
        self.objective_root = nn.Module()
        self.ties: list[tuple[str, str, str]] = []

    def placeholder(self, node: NodeView):
        return None

    def call(self, node: NodeView, args: list):
        inputs = [self.graph.type_of(name) for name in node.inputs]
        rule = rule_for(node.op)
        if rule is None:
            raise bug(f"{node.op.label} has no lowering (its torch side is not installed)", node.loc, node.name)
        try:
            module = rule(node.params, inputs, LoweringContext(self.graph, node, self.ties))
        except InternalError:
            raise
        except (MemoryError, RuntimeError) as exc:
            if not ran_out_of_memory(exc):
                raise bug(f"lowering failed: {type(exc).__name__}: {exc}", node.loc, node.name,
                          hint="the spec passed the checker, so this is a bug in archspec") from exc
            raise error(f"making {node.name}'s module ran out of memory ({first_line(exc)}): its tensors need "
                        "more than this machine has free", node.loc, node.name,
                        hint=f"use a smaller input size, or free memory (the estimate is capped by "
                             f"{MAX_BUILD_BYTES})") from None
        except Exception as exc:  # a failure inside lowering is a bug, reported at the node
            raise bug(f"lowering failed: {type(exc).__name__}: {exc}", node.loc, node.name,
                      hint="the spec passed the checker, so this is a bug in archspec") from exc
        if node.name.startswith(OBJECTIVES + "."):
            install(self.objective_root, node.name[len(OBJECTIVES) + 1:], module)
        else:
            install(self.root, node.name, module)
        return None

    def output(self) -> torch.fx.GraphModule:
        for path, attribute, owner in self.ties:
            setattr(self.root.get_submodule(path), attribute, self.root.get_submodule(owner))
        share_weights(self.root, self.graph)
        hierarchy = Hierarchy(self.graph, self.root, self.mark)
        uncalled = uncalled_modules(self.root, hierarchy.live, self.graph)  # before groups replace their containers
        inputs = [n.name for n in self.graph.inputs()]
        forward = hierarchy.build("", force=(inputs, [o.node for o in self.graph.outputs]))
        gm = ArchspecModel(self.root, forward, class_name=class_name(self.graph.name))
        keep_uncalled(gm, uncalled)
        gm.meta["archspec_uncalled"] = tuple(uncalled)  # modules forward never calls (no gradient reaches them)
        gm.graph.lint()
        gm.meta["archspec"] = model_facts(self.graph)  # a ModelFacts (interface.py): ArchspecModel.facts
        gm.meta["archspec_inputs"] = input_shapes(self.graph)  # what calling the model checks (model.py)
        gm.meta["archspec_spec"] = spec_record(self.graph)  # what a model folder needs (pretrained.py)
        if self.graph.objectives:
            gm.__dict__["_objective"] = torch.fx.GraphModule(self.objective_root, self.objective_graph())
        features = features_graph(gm)
        if features is not None:
            gm.__dict__["_features"] = torch.fx.GraphModule(gm, features)
        return gm

    def mark(self, fx_node: torch.fx.Node, name: str) -> torch.fx.Node:
        """Tie an fx call to its IR node: meta, and a stack frame at the spec's file:line."""
        fx_node.meta["archspec_node"] = name
        fx_node.meta["archspec_output"] = True
        loc = self.graph.record(name).loc
        if loc:
            fx_node.stack_trace = f'  File "{loc.file}", line {loc.line}, in {name}\n'
        return fx_node

    def objective_graph(self) -> torch.fx.Graph:
        """(weighted total, each objective's value) from forward's outputs, then the inputs and
        the targets (what ArchspecModel.losses passes)."""
        fx = torch.fx.Graph()
        env = {}
        for out in self.graph.outputs:  # one placeholder per distinct output node
            if out.node not in env:
                env[out.node] = fx.placeholder("out_" + out.name)
        for node in self.graph.inputs() + self.graph.targets():
            env[node.name] = fx.placeholder(node.name)
        values = []
        for objective in self.graph.objectives:
            args = tuple(env[s] for s in self.graph.inputs_of(objective.node))
            values.append(self.mark(fx.call_module(objective.node[len(OBJECTIVES) + 1:], args), objective.node))
        total = None
        for objective, value in zip(self.graph.objectives, values):
            weight = self.graph.record(objective.node).params.weight
            term = value if weight == 1.0 else fx.call_function(operator.mul, (value, weight))
            total = term if total is None else fx.call_function(operator.add, (total, term))
        fx.output((total, *values))
        return fx


def uncalled_modules(root: nn.Module, live: set[str], graph: Graph) -> dict[str, nn.Module]:
    """The modules of the nodes no output depends on, by path (forward will not call them)."""
    return {node.name: root.get_submodule(node.name) for node in graph.nodes()
            if not node.is_input and node.name not in live and not node.name.startswith(OBJECTIVES + ".")}


def keep_uncalled(gm: nn.Module, uncalled: dict[str, nn.Module]) -> None:
    """The uncalled modules back at their paths in `gm` (fx keeps only the modules its graphs
    call, in the groups too): they keep their parameters, so that a reference's unused pooler or
    mask token loads and counts as in the reference."""
    for path, module in uncalled.items():
        *parents, leaf = path.split(".")
        owner = gm
        for part in parents:
            if not hasattr(owner, part):
                owner.add_module(part, nn.Module())
            owner = getattr(owner, part)
        if not hasattr(owner, leaf):
            owner.add_module(leaf, module)


def share_weights(root: nn.Module, graph: Graph) -> None:
    """`share: true` on a repeat: each copy keeps its own module (the module tree stays the call
    tree), and its parameters are the very tensors of the node it shares with (meta["shared_with"],
    copy 0's), as a tied embedding is: model.parameters() holds them once, an optimizer step moves
    every copy, their gradients add up. Buffers are shared where their values agree (a fixed
    table); one that differs between copies (a shifted window's mask) stays the copy's own."""
    for node in graph.nodes():
        owner = node.meta.get("shared_with")
        if owner is None or node.name.startswith(OBJECTIVES + "."):
            continue
        mine, theirs = root.get_submodule(node.name), root.get_submodule(owner)
        held = dict(theirs.named_modules(remove_duplicate=False))
        for name, sub in mine.named_modules(remove_duplicate=False):
            twin = held.get(name)
            for key, value in list(sub._parameters.items()):
                other = twin._parameters.get(key) if twin is not None else None
                if value is None and other is None:
                    continue
                if value is None or other is None or value.shape != other.shape:
                    raise bug(f"shared weights: {node.name}'s {name + '.' if name else ''}{key} "
                              f"{tuple(value.shape) if value is not None else None} has no twin of its shape in "
                              f"{owner}", node.loc, node.name)
                sub._parameters[key] = other
            for key, value in list(sub._buffers.items()):
                other = twin._buffers.get(key) if twin is not None else None
                if (value is not None and other is not None and value.shape == other.shape
                        and value.dtype == other.dtype and torch.equal(value, other)):
                    sub._buffers[key] = other


def features_graph(gm: ArchspecModel) -> torch.fx.Graph | None:
    """forward up to the head: the root graph returning what the head reads (None when the
    head is not called at the top level)."""
    head = gm.facts.head
    if head is None:
        return None
    graph = torch.fx.Graph()
    env = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            break
        env[node] = graph.node_copy(node, lambda a: env[a])
    reads = next((n for n in gm.graph.nodes if n.meta.get("archspec_node") == head.reads), None)
    if reads is None:
        return None
    graph.output(env[reads])
    graph.owning_module = gm  # for eliminate_dead_code's purity check of module calls
    graph.eliminate_dead_code()
    return graph


def first_line(exc: BaseException) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return (text or type(exc).__name__)[:200]


def lower(graph: Graph, seed: int = 0) -> torch.fx.GraphModule:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Lowering(graph).run()


_TRACE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<path>\S+)')


def locate(graph: Graph, stack_trace: str | None, module_paths=()) -> tuple[str | None, Loc | None]:
    """The archspec node an fx node (or a traceback) came from: lowering writes a stack trace
    'File "<spec>", line N, in <node path>' on every call of a node's module (Lowering.mark),
    which torch's exporters repeat in their errors; exported graphs also keep the module stack,
    whose paths are node paths or lie inside one."""
    for match in reversed(list(_TRACE.finditer(stack_trace or ""))):
        if match["path"] in graph:
            node = graph.node(match["path"])
            return node.name, node.loc or Loc(match["file"], int(match["line"]), 1)
    for path in reversed(list(module_paths)):
        path = re.sub(r"^L\['self'\]\.?", "", path or "")
        parts = path.split(".") if path else []
        while parts:
            candidate = ".".join(parts)
            if candidate in graph:
                return candidate, graph.node(candidate).loc
            parts.pop()
    return None, None


def module_paths_of(node) -> list[str]:
    """The module paths torch.export keeps on an fx node (innermost last)."""
    stack = node.meta.get("nn_module_stack") or {}
    return [value[0] for value in stack.values()]
