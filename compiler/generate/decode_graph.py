"""The model's decode graph: what generate() (and the exported decode steps) call instead of the
model, so that what a module needs of the decode cache reaches it as an argument.

It is a copy of the model's fx graph, and of the graph of every group on the way to such a
module, with one more input, `cache` (cache.py's DecodeCache), handed on to each group that
holds one. Each module that reads it is given its own part (a `Handoff`, chosen by the Decoder):
a cached attention layer its KVCache and a cross attention layer its kept memory, both read by
the layer's path, an embedding the positions, a relative bias the whole cache:

    def forward(self, input_ids, cache):                      # the model's copy
        embed_positions = cache.positions()
        embed = self.embed(input_ids, positions = embed_positions)
        layers = self.layers(embed, cache = cache)
        ...
    def forward(self, x, cache):                              # layers.0's copy
        attn_cache = cache.layer('layers.0.attn')
        attn = self.attn(x, cache = attn_cache)
        mlp = self.mlp(attn)

The part is read in the graph, by path, not by the module from the whole cache by its own
identity: torch.export's tracer calls each module through a proxy of it, which is not the
module a dictionary was keyed by. An encoder-decoder's source-only nodes (its source embedding
and encoder, which read the source alone) take their output from the cache, computed at the
first call: `encoder_kept = cache.source('encoder', encoder_module, src_embed_kept)`
(encoder_module = self.encoder).

The copies hold the model's own modules (no weight is copied) at the model's paths, so a
program exported from them names its weights and module stack as the model does. They are
made once per Decoder (driver.py); the model's forward, graph, modules and state_dict are not
touched.
"""

from __future__ import annotations

import copy
import operator
from typing import NamedTuple

import torch
import torch.fx
import torch.nn as nn


class Handoff(NamedTuple):
    """What the decode graph hands one module: `keyword=cache.method(path)` (`keyed`), or
    `keyword=cache.method()`, or the whole cache (`method` None)."""

    path: str
    keyword: str = "cache"
    method: str | None = None
    keyed: bool = False


class DecodeGraph:
    """Makes the decode copies (see the module docstring) and keeps which modules got their part.
    `readers`: {id(module): its Handoff}."""

    def __init__(self, readers: dict[int, Handoff]):
        self.readers = readers
        self.reached: set[int] = set()

    def copy(self, module: torch.fx.GraphModule, source_side=None) -> torch.fx.GraphModule:
        """`module`'s decode copy. `source_side` (the model's): {name: computed once?} of the
        call_module nodes that read the source alone: those computed once read the cache's kept
        outputs, the others (their module is also called on the target side) stay as they are."""
        source_side = source_side or {}
        graph = copy.deepcopy(module.graph)
        cache = cache_input(graph)
        parts = {}
        for node in list(graph.nodes):
            if node.op in ("get_attr", "call_module"):
                parts[node.target] = operator.attrgetter(node.target)(module)
            if node.op == "call_module" and node.name in source_side:
                if source_side[node.name]:
                    computed_once(node, cache)
            elif node.op == "call_module":
                parts[node.target] = self.hand_cache(node, parts[node.target], cache)
        graph.lint()
        copied = torch.fx.GraphModule(parts, graph, class_name=type(module).__name__)
        copied.training = module.training  # the copy's own flag (its children are the model's)
        return copied

    def hand_cache(self, node: torch.fx.Node, module: nn.Module, cache: torch.fx.Node):
        """The module `node` calls in the copy, the node rewritten to hand it the cache."""
        if id(module) in self.readers:
            handoff = self.readers[id(module)]
            node.kwargs = {**node.kwargs, handoff.keyword: part_of(cache, node, handoff)}
            self.reached.add(id(module))
        elif isinstance(module, torch.fx.GraphModule) and self.holds_reader(module):
            module = self.copy(module)
            node.kwargs = {**node.kwargs, placeholder_of(module).target: cache}
        return module

    def holds_reader(self, module: nn.Module) -> bool:
        return any(id(m) in self.readers for m in module.modules())


def cache_input(graph: torch.fx.Graph) -> torch.fx.Node:
    """A new last input `cache` of the graph (`cache_` ... if an input has that name)."""
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    name = "cache"
    while name in {n.target for n in inputs}:
        name += "_"
    with graph.inserting_after(inputs[-1]) if inputs else graph.inserting_before():
        return graph.placeholder(name)


def part_of(cache: torch.fx.Node, node: torch.fx.Node, handoff: Handoff) -> torch.fx.Node:
    """What `node`'s module is handed: the cache, or a node before it that reads its part."""
    if handoff.method is None:
        return cache
    args = (cache, handoff.path) if handoff.keyed else (cache,)
    with node.graph.inserting_before(node):
        return node.graph.create_node("call_method", handoff.method, args, name=f"{node.name}_{handoff.keyword}")


def placeholder_of(module: torch.fx.GraphModule) -> torch.fx.Node:
    """A decode copy's `cache` input (its last)."""
    return [n for n in module.graph.nodes if n.op == "placeholder"][-1]


def computed_once(node: torch.fx.Node, cache: torch.fx.Node) -> None:
    """`x = self.m(*args)` -> `x_module = self.m; x_kept = cache.source('x', x_module, *args)`."""
    graph = node.graph
    with graph.inserting_before(node):
        module = graph.create_node("get_attr", node.target, name=f"{node.name}_module")
        kept = graph.create_node("call_method", "source", (cache, node.name, module, *node.args), dict(node.kwargs),
                                 name=f"{node.name}_kept")
    node.replace_all_uses_with(kept)
    graph.erase_node(node)


def without_padding_inputs(copied: torch.fx.GraphModule, padding: tuple[str, ...]) -> torch.fx.GraphModule:
    """The decode copy without the inputs `padding` (kv_cache.padding_inputs: read only as cached
    attention's key-padding mask, which a layer handed its cache does not read; the cache's
    mask hides the padded keys): each becomes ones like the target ids, so the copy is called
    as a decoder-only spec's, (ids, cache)."""
    if not padding:
        return copied
    graph = copied.graph
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    ids = [n for n in inputs[:-1] if n.target not in padding][-1]  # the last is the cache
    with graph.inserting_after(inputs[-1]):
        stand_in = graph.call_function(torch.ones_like, (ids,))  # [B, count]: every key kept (never read)
    for node in inputs:
        if node.target in padding:
            node.replace_all_uses_with(stand_in)
            graph.erase_node(node)
    graph.lint()
    copied.recompile()
    return copied


def decode_graph(model: torch.fx.GraphModule, readers: dict[int, Handoff], source_side: dict[str, bool],
                 padding: tuple[str, ...] = ()):
    """(the model's decode copy, handing each module of `readers` ({id(module): Handoff}) on the
    target side its part, the paths of the readers it cannot reach: inside a module that is not
    a group). `source_side`: Decoder.source_side (DecodeGraph.copy); `padding`: the inputs it
    takes no more (without_padding_inputs)."""
    making = DecodeGraph(readers)
    copied = without_padding_inputs(making.copy(model, source_side), padding)
    return copied, [handoff.path for key, handoff in readers.items() if key not in making.reached]
