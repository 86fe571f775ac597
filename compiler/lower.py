"""lower: IR -> torch.fx.GraphModule.

One submodule per IR node, installed at its dotted path; each primitive's lowering emits its
fx nodes (a sub-layer's norm, body and residual add separately, so `gm.code` reads like the
paper). Every fx node records the IR node it belongs to (`meta["archspec_node"]`) and a stack
trace pointing at the spec's file:line. The same seed gives the same weights.
"""

from __future__ import annotations

import re

import torch
import torch.fx
import torch.nn as nn

from archspec.diagnostics import Loc, error

from .ir import INPUT, Graph
from .modules import LOWERINGS
from .modules.common import Emitter


def class_name(spec_name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", spec_name) if part) or "Model"


def lower(graph: Graph, seed: int = 0) -> torch.fx.GraphModule:
    root = nn.Module()
    fx_graph = torch.fx.Graph()
    values: dict[str, torch.fx.Node] = {}
    ties: list[tuple[str, str, str]] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for node in graph.nodes():
            if node.op == INPUT:
                placeholder = fx_graph.placeholder(node.name)
                placeholder.meta["archspec_node"] = node.name
                values[node.name] = placeholder
                continue
            inputs = [graph.node(name).type for name in node.inputs]
            emit = Emitter(root, fx_graph, graph, node, ties)
            try:
                out = LOWERINGS[node.op](node, inputs, emit, [values[name] for name in node.inputs])
            except Exception as exc:  # a failure inside lowering is reported at the node
                failure = error(f"lowering failed: {type(exc).__name__}: {exc}", node.loc, node.name,
                                hint="the spec passed the checker, so this is a bug in archspec")
                failure.is_bug = True
                raise failure from exc
            out.meta["archspec_output"] = True
            values[node.name] = out
    for path, attribute, owner in ties:
        setattr(root.get_submodule(path), attribute, root.get_submodule(owner))
    outputs = [values[o.node] for o in graph.outputs]
    fx_graph.output(outputs[0] if len(outputs) == 1 else tuple(outputs))
    gm = torch.fx.GraphModule(root, fx_graph, class_name=class_name(graph.name))
    gm.graph.lint()
    gm.meta["archspec"] = {"name": graph.name, "file": graph.file,
                           "inputs": [n.name for n in graph.inputs()],
                           "outputs": [o.name for o in graph.outputs]}
    return gm


_TRACE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<path>\S+)')


def locate(graph: Graph, stack_trace: str | None, module_paths=()) -> tuple[str | None, Loc | None]:
    """The archspec node an fx node (or a traceback) came from: lowering writes a stack trace
    'File "<spec>", line N, in <node path>' on every fx node (Emitter._mark), which torch's
    exporters repeat in their errors; exported graphs also keep the module stack, whose paths
    are node paths or lie inside one."""
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
