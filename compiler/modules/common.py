"""Torch pieces shared by the primitives: the lowering registry, the emitter that adds fx
nodes for one IR node, the sub-layer pattern (norm, body, residual add as separate fx
nodes), stochastic depth, and the reference initialisation.

Module classes in compiler/modules/ use only `math`, `torch`, `nn` and `F`, so that their
source can be copied into a standalone model.py.
"""

from __future__ import annotations

import operator
from typing import Callable

import torch
import torch.nn as nn

LOWERINGS: dict[str, Callable] = {}


def register_lowering(op: str):
    def wrap(fn):
        if op in LOWERINGS:
            raise RuntimeError(f"lowering for {op!r} is registered twice")
        LOWERINGS[op] = fn
        return fn

    return wrap


class DropPath(nn.Module):
    """Stochastic depth: drop the whole residual branch per sample (identity in eval)."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x):
        if self.rate == 0.0 or not self.training:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)  # [B, 1, ..., 1]
        return x * mask / keep


def trunc_normal_linears(module: nn.Module, std: float = 0.02) -> None:
    """timm's init for transformer linears: truncated normal weights, zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def make(cls, **kwargs) -> nn.Module:
    """Construct a module and remember how, so model.py can construct it again."""
    module = cls(**kwargs)
    module._archspec_args = kwargs
    return module


class Emitter:
    """Adds the fx nodes and submodules of one IR node."""

    def __init__(self, root: nn.Module, graph: torch.fx.Graph, ir, node, ties: list):
        self.root, self.graph, self.ir, self.node, self.ties = root, graph, ir, node, ties
        self.stem = node.name.replace(".", "_")

    @property
    def current(self):
        """The IR node being lowered (the shape rules' helpers read it as their context)."""
        return self.node

    def node_named(self, name: str):
        """Another IR node (the shape rules' helpers look up tied tables this way)."""
        return self.ir.node(name)

    def install(self, module: nn.Module, sub: str = "") -> str:
        path = self.node.name + (f".{sub}" if sub else "")
        parent = self.root
        *parents, leaf = path.split(".")
        for part in parents:
            if not hasattr(parent, part):
                parent.add_module(part, nn.Module())
            parent = getattr(parent, part)
        parent.add_module(leaf, module)
        return path

    def _mark(self, fx_node, role: str):
        fx_node.meta["archspec_node"] = self.node.name
        fx_node.meta["archspec_role"] = role
        if self.node.loc:
            fx_node.stack_trace = f'  File "{self.node.loc.file}", line {self.node.loc.line}, in {self.node.name}\n'
        return fx_node

    def call(self, sub: str, *args, role: str | None = None):
        target = self.node.name + (f".{sub}" if sub else "")
        name = self.stem + (f"_{sub.replace('.', '_')}" if sub else "")
        return self._mark(self.graph.create_node("call_module", target, args, name=name), role or sub or "body")

    def function(self, fn, *args, role: str):
        name = f"{self.stem}_{role}"
        return self._mark(self.graph.create_node("call_function", fn, args, name=name), role)

    def tie(self, sub: str, attribute: str, owner: str):
        """After all modules exist: `<this node>.<sub>.<attribute>` = module at `owner`."""
        self.ties.append((self.node.name + (f".{sub}" if sub else ""), attribute, owner))


def layer_norm(width: int, eps: float) -> nn.Module:
    return make(nn.LayerNorm, normalized_shape=width, eps=eps)


def emit_sublayer(emit: Emitter, body: nn.Module, p, width: int, x, *extra):
    """Install `body` at the node's path with its norm, and emit norm / body / residual add:

    pre       x + drop_path(body(norm(x)))
    post      norm(x + drop_path(body(x)))
    res_post  x + drop_path(norm(body(x)))
    none      x + drop_path(body(x))
    """
    emit.install(body)
    if p.norm != "none":
        norm = layer_norm(width, p.norm_eps)
        if p.norm == "res_post":  # Swin v2 (and timm) zero this norm: every block starts as the identity
            nn.init.zeros_(norm.weight)
            nn.init.zeros_(norm.bias)
        emit.install(norm, "norm")
    if p.drop_path > 0:
        emit.install(make(DropPath, rate=p.drop_path), "drop_path")

    def drop(h):
        return emit.call("drop_path", h) if p.drop_path > 0 else h

    if p.norm == "pre":
        h = emit.call("", emit.call("norm", x), *extra)
        return emit.function(operator.add, x, drop(h), role="add")
    if p.norm == "post":
        h = emit.function(operator.add, x, drop(emit.call("", x, *extra)), role="add")
        return emit.call("norm", h, role="norm_out")
    if p.norm == "res_post":
        h = emit.call("norm", emit.call("", x, *extra))
        return emit.function(operator.add, x, drop(h), role="add")
    return emit.function(operator.add, x, drop(emit.call("", x, *extra)), role="add")

