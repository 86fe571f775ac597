"""Which option of a node gives the checkpoint's shapes, where a load finds tensors of the wrong
shape: for the first node of each kind of place (`layers.#.attn`) whose tensors differ, every
other value of each of its choice options (a Literal or a bool: qk_norm_over, gated, qkv_bias...)
that its op's rule accepts is lowered on the meta device, and one under which the node's tensors
are exactly the checkpoint's (the same names and shapes, nothing more or less) is named in the
error's hint (the OLMoE trial's q_norm [64] against the model's [16] was told only that the
shapes differ; `qk_norm_over: all_heads` made them fit). Options that take numbers are not
tried: a count (kv_heads, hidden) is the spec's params to give."""

from __future__ import annotations

import re
import types
import typing
from typing import Literal

import torch

from archspec.core.ir import Graph, NodeView
from archspec.primitives.infer import GraphContext

from ..lowering_rules import LoweringContext, rule_for

MOST_NAMED = 3  # places named in one hint


class QuietContext(GraphContext):
    """A rule context whose warnings go nowhere (a value tried here is not the spec's)."""

    def warn(self, message: str, field: str | None = None, hint: str | None = None) -> None:
        pass


def option_hint(graph: Graph | None, state: dict, wrong_keys: list[str]) -> str | None:
    """'`qk_norm_over: all_heads` on 'layers.0.attn' (and its 1 other copy) gives the
    checkpoint's shapes', for each place found; None when no choice does (or no graph)."""
    if graph is None or not wrong_keys:
        return None
    found = []
    for name, copies in places(graph, wrong_keys).items():
        node = graph.node(name)
        fitting = first_fitting_option(graph, node, node_tensors(state, name))
        if fitting is not None:
            field, value = fitting
            others = f" (and its {copies - 1} other {'copy' if copies == 2 else 'copies'})" if copies > 1 else ""
            found.append(f"`{field}: {yaml_word(value)}` on '{name}'{others} gives the checkpoint's shapes")
        if len(found) == MOST_NAMED:
            break
    return "; ".join(found) or None


def places(graph: Graph, keys: list[str]) -> dict[str, int]:
    """The owning node of each key, one per place (its repeat copies' numbers made #), with how
    many copies of that place hold a key."""
    names = {node.name for node in graph.nodes() if not node.is_input}
    first: dict[str, str] = {}
    copies: dict[str, set[str]] = {}
    for key in keys:
        owner = owning_node(names, key)
        if owner is None:
            continue
        place = re.sub(r"\.\d+(?=\.|$)", ".#", owner)
        first.setdefault(place, owner)
        copies.setdefault(place, set()).add(owner)
    return {owner: len(copies[place]) for place, owner in first.items()}


def owning_node(names: set[str], key: str) -> str | None:
    """The longest node name that is a dotted prefix of `key`."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:end]) in names:
            return ".".join(parts[:end])
    return None


def node_tensors(state: dict, name: str) -> dict[str, tuple]:
    """The checkpoint's tensors (in the model's naming) under node `name`: relative name -> shape."""
    prefix = name + "."
    return {key[len(prefix):]: tuple(value.shape) for key, value in state.items() if key.startswith(prefix)}


def first_fitting_option(graph: Graph, node: NodeView, wanted: dict[str, tuple]) -> tuple[str, object] | None:
    """(option, value): the first other value of a choice option under which the node's module
    has exactly the tensors `wanted`."""
    for field, value in alternatives(node.params):
        try:
            params = node.params.model_copy(update={field: value})
            shapes = module_shapes(graph, node, params)
        except Exception:  # noqa: BLE001 - a value the rule refuses, or one that changes what the node reads
            continue  # (external queries: inputs it has not), which the rule was never asked with: not a fit
        if shapes == wanted:
            return field, value
    return None


def alternatives(params) -> list[tuple[str, object]]:
    """(option, value) for each value a choice option (a Literal, a bool) could take instead of its own."""
    found = []
    for field, info in type(params).model_fields.items():
        current = getattr(params, field)
        for value in choices(info.annotation):
            if value != current:
                found.append((field, value))
    return found


def choices(annotation) -> list:
    """The values of a Literal or bool option (inside an Optional or a Union too); [] otherwise."""
    if annotation is bool:
        return [True, False]
    if typing.get_origin(annotation) is Literal:
        return list(typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [value for arg in typing.get_args(annotation) for value in choices(arg)]
    return []


def module_shapes(graph: Graph, node: NodeView, params) -> dict[str, tuple]:
    """The node's module's tensors under `params` -> their shapes, made on the meta device."""
    inputs = [graph.type_of(name) for name in node.inputs]
    node.op.shape(params, inputs, QuietContext(graph, node))  # the rule's word on this value
    with torch.device("meta"):
        module = rule_for(node.op)(params, inputs, LoweringContext(graph, node, []))
    return {key: tuple(value.shape) for key, value in module.state_dict().items()}


def yaml_word(value) -> str:
    """A value as the spec writes it (true, false, a word)."""
    return str(value).lower() if isinstance(value, bool) else str(value)
