"""How the torch side of a primitive registers: a lowering rule per op object, and the
context it receives.

    @lowering(WINDOW)                       # archspec/compiler/modules/attention/window.py
    def lower(p, inputs, ctx) -> nn.Module:
        return make(WindowAttention, dim=inputs[0].channels, ...)

A rule gets the node's validated params, its inputs' tensor types and a `LoweringContext`
(the same `RuleContext` the shape rules get, plus what building needs), and returns the
module that computes the node from its inputs. lower.py installs it at the node's dotted path
and calls it; for a sub-layer (params derived from `Sublayer`) it adds the norm, drop-path
and residual around it. Rules are keyed by the op object (JAX's `register_lowering(prim, rule)`),
never by a string; registering an op twice is an error.

The rule files are found by discovery: every module under archspec.compiler.modules is
imported once (`load_lowerings`), by the package's name, since they import this module.
"""

from __future__ import annotations

from typing import Callable

import torch.nn as nn

from archspec.core.discovery import import_modules
from archspec.core.ir import Graph, NodeView
from archspec.primitives.base import Op
from archspec.primitives.plugins import load_torch_side

Rule = Callable[..., nn.Module]  # (params, input types, LoweringContext) -> module
LOWERINGS: dict[Op, Rule] = {}
_LOADED = False


class LoweringError(Exception):
    """A lowering rule is registered twice (a bug in archspec or in a plugin)."""


def lowering(op: Op):
    def register(rule: Rule) -> Rule:
        if op in LOWERINGS:
            raise LoweringError(f"the lowering of {op.label} is registered twice")
        LOWERINGS[op] = rule
        return rule

    return register


def load_lowerings() -> None:
    """Import every module under archspec.compiler.modules (each registers its lowerings)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    import_modules("archspec.compiler.modules")  # by name: the rule files import this module


def load_torch_side_of(op: Op) -> None:
    """Import the files that register `op`'s lowering and its torch-side facts (facts.py)."""
    load_lowerings()
    if op not in LOWERINGS and op.plugin is not None:
        load_torch_side(op.plugin)  # a plugin's lowerings load with the first model that needs them


def rule_for(op: Op) -> Rule | None:
    load_torch_side_of(op)
    return LOWERINGS.get(op)


class LoweringContext:
    """What a lowering rule sees: the node (its params, type, path), other nodes, and
    `tie` to share a module of another node (an embedding table)."""

    def __init__(self, graph: Graph, node: NodeView, ties: list[tuple[str, str, str]]):
        self.graph, self.node, self._ties = graph, node, ties

    def node_named(self, name: str) -> NodeView:
        return self.graph.node(name)

    def readers(self, name: str) -> list[str]:
        return self.graph.readers(name)

    def tie(self, attribute: str, owner: str) -> None:
        """Once every module exists: `<this node's module>.<attribute>` = the module at path `owner`."""
        self._ties.append((self.node.name, attribute, owner))
