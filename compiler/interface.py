"""What the built model (model.py) and training code need to know about the spec, read off the
IR at lowering into a `ModelFacts` kept in `model.meta["archspec"]` (`model.facts`): its
inputs, targets, outputs and objectives, and for the timm-style interface the classifier head
(the top-level head whose CLASSIFIER is a Classifier, compiler/facts.py), the blocks (the
innermost repetitions), the stages (the repetitions of the first repeat) and the layer of
every module for layer-wise learning-rate decay. `interface_facts` gives the plain values the
timm-style methods (model_interface.py) read."""

from __future__ import annotations

from dataclasses import dataclass

from archspec.core.ir import Graph
from archspec.language.names import OBJECTIVES
from archspec.primitives.kv_cache import (cached_layers, logits_output, mask_inputs, padding_inputs, recent_layers,
                                          refusal)
from archspec.primitives.kv_cache import uncached_refusal

from .facts import CLASSIFIER, FEATURE_NORM, Classifier
from .model_interface import InterfaceFacts

MERGE_WITH_PREVIOUS = 99999  # timm's ordinal suffix for "the same layer as the one before"


@dataclass(frozen=True)
class Head:
    """The model's classifier: the head node at `path`, its Classifier (CLASSIFIER fact), the
    width of what it reads and the node it reads (`reads`: what forward_features returns), that
    node's token grid (None: not on one) and prefix tokens, and forward_features' default format (`features_fmt`):
    "NHWC" for a hierarchical grid model (its stages shrink the grid, as Swin's and PVT's),
    "NLC" (tokens) for every other."""

    path: str
    classifier: Classifier
    width: int
    reads: str
    grid: tuple[int, int] | None = None
    prefix: int = 0
    features_fmt: str = "NLC"
    final_norm: str | None = None  # the norm node the head reads, if it reads one (forward_intermediates' norm)


@dataclass(frozen=True)
class Stage:
    """A repetition of the model's first repeat (forward_intermediates): its path, the node whose
    output it gives, and that output's token grid (None: not on a grid), prefix tokens and shape."""

    path: str
    node: str
    grid: tuple[int, int] | None
    prefix: int
    shape: tuple


@dataclass(frozen=True)
class ModelFacts:
    """What a built model knows of its spec (written at lowering, read by model.py and training)."""

    name: str
    file: str | None
    inputs: tuple[str, ...]
    targets: tuple[str, ...]
    outputs: tuple[str, ...]  # forward's outputs by name
    output_nodes: tuple[str, ...]  # the node each output is (one node may be two outputs)
    node_paths: tuple[str, ...]  # the network's nodes (not inputs, not objectives)
    objectives: tuple[str, ...]
    head: Head | None
    blocks: tuple[str, ...]
    stages: tuple[Stage, ...]
    layers: dict[str, tuple]  # module path -> layer ordinal, per block
    coarse_layers: dict[str, tuple]  # the same, per stage
    logits: tuple[int, str] | None = None  # (output index, lm head node) of the logits generate() reads
    # why generate() cannot decode the spec through a cache, (node or None, why), or None (kv_cache.refusal)
    decode_refusal: tuple[str | None, str] | None = None
    # why generate() cannot run the spec at all, not even without a cache (kv_cache.uncached_refusal)
    generate_refusal: tuple[str | None, str] | None = None
    cached: tuple[tuple[str, int | None], ...] = ()  # (node, window or None) of each layer with a self cache
    recent: tuple[tuple[str, int], ...] = ()  # (node, tokens kept) of each causal conv keeping its last inputs
    padding_inputs: tuple[str, ...] = ()  # inputs read only as cached attention's key-padding mask (kv_cache's)
    mask_inputs: tuple[str, ...] = ()  # inputs read only as any attention's key-padding mask (kv_cache's)
    refill_at: int | None = None  # the sequence length at which generate recomputes every cached key (DECODE's refill)
    ops: tuple[tuple[str, str, str | None], ...] = ()  # (node, primitive, kind) of every network node: its op's facts

    @property
    def fed_inputs(self) -> tuple[str, ...]:
        """The inputs generate() feeds (kv_cache.fed_inputs): all but the padding inputs."""
        return tuple(name for name in self.inputs if name not in self.padding_inputs)


def model_facts(graph: Graph) -> ModelFacts:
    found_stages = stages(graph)
    found_blocks = blocks(graph)
    cached = cached_layers(graph)
    return ModelFacts(name=graph.name, file=graph.file, inputs=tuple(n.name for n in graph.inputs()),
                      targets=tuple(n.name for n in graph.targets()), outputs=tuple(o.name for o in graph.outputs),
                      output_nodes=tuple(o.node for o in graph.outputs), node_paths=tuple(network_nodes(graph)),
                      objectives=tuple(o.name for o in graph.objectives), head=head(graph, found_stages),
                      blocks=tuple(found_blocks), stages=tuple(found_stages),
                      layers=layers(graph, found_blocks), coarse_layers=layers(graph, [s.path for s in found_stages]),
                      logits=logits_output(graph), decode_refusal=refusal(graph),
                      generate_refusal=uncached_refusal(graph),
                      cached=tuple((layer.path, layer.window) for layer in cached),
                      recent=tuple((layer.path, layer.count) for layer in recent_layers(graph)),
                      refill_at=min((layer.refill for layer in cached if layer.refill is not None), default=None),
                      padding_inputs=padding_inputs(graph), mask_inputs=mask_inputs(graph),
                      ops=tuple((name, graph.record(name).op.primitive, graph.record(name).op.kind)
                                for name in network_nodes(graph)))


def parent(path: str) -> str:
    return path.rpartition(".")[0]


def repetitions(graph: Graph) -> list[str]:
    """Paths of the repetitions of every repeat (`blocks.0`, `stages.1`, ...), in node order."""
    reps = [p for p in graph.groups if parent(p) in graph.groups and graph.groups[parent(p)].kind == "repeat"
            and p.rsplit(".", 1)[-1].isdigit()]
    rank = first_rank(graph)
    return sorted(reps, key=lambda p: rank.get(p, 0))


def first_rank(graph: Graph) -> dict[str, int]:
    """For every group path, the order of its first node."""
    rank: dict[str, int] = {}
    for i, node in enumerate(graph.nodes()):
        parts = node.name.split(".")
        for k in range(1, len(parts)):
            rank.setdefault(".".join(parts[:k]), i)
    return rank


def network_nodes(graph: Graph) -> list[str]:
    return [n.name for n in graph.nodes() if not n.is_input and not n.name.startswith(OBJECTIVES + ".")]


def blocks(graph: Graph) -> list[str]:
    """The innermost repetitions: those that hold no repeat themselves."""
    reps = repetitions(graph)
    return [r for r in reps if not any(g.startswith(r + ".") and graph.groups[g].kind == "repeat"
                                       for g in graph.groups)]


def stages(graph: Graph) -> list[Stage]:
    """The repetitions of the shallowest, first repeat, with the layout of what each gives."""
    repeats = [p for p, info in graph.groups.items() if info.kind == "repeat"]
    if not repeats:
        return []
    rank = first_rank(graph)
    first = min(repeats, key=lambda p: (p.count("."), rank.get(p, 0)))
    out = []
    for path in repetitions(graph):
        if parent(path) != first:
            continue
        inside = [n for n in network_nodes(graph) if n.startswith(path + ".")]
        if not inside:  # every node of this repetition was left out (`if: false`): it passes its input on
            continue
        given = [n for n in inside if any(not r.startswith(path + ".") for r in graph.readers(n))
                 or n in {o.node for o in graph.outputs}]
        last = (given or inside)[-1]
        t = graph.type_of(last)
        out.append(Stage(path=path, node=last, grid=tuple(t.grid) if t.grid else None, prefix=t.prefix,
                         shape=tuple(d if isinstance(d, int) else str(d) for d in t.shape)))
    return out


def head(graph: Graph, found_stages: list[Stage] | None = None) -> Head | None:
    """The classifier: a top-level node the model returns whose op's CLASSIFIER is a Classifier
    (compiler/facts.py: head kinds classify and distilled)."""
    returned = {o.node for o in graph.outputs}
    for name in network_nodes(graph):
        if "." in name or name not in returned:
            continue
        classifier = CLASSIFIER.of(graph.record(name).op, graph.node(name))
        if classifier is not None:
            (source,) = graph.inputs_of(name)
            t = graph.type_of(source)
            grid = int_grid(t.grid)
            fmt = "NHWC" if grid and not t.prefix and hierarchical(found_stages or []) else "NLC"
            given = getattr(graph.record(name).params, "features_format", "auto")
            fmt = fmt if given == "auto" else given  # the spec says what timm's model of the family gives
            record = graph.record(source)  # a graph input read by the head has no op's facts
            final_norm = source if "." not in source and not record.is_input and FEATURE_NORM.get(record.op, False) \
                else None
            return Head(path=name, classifier=classifier, width=t.channels, reads=source, grid=grid, prefix=t.prefix,
                        features_fmt=fmt, final_norm=final_norm)
    return None


def int_grid(grid) -> tuple[int, int] | None:
    """A grid of fixed sizes as (H, W); None for none, or one with a symbolic size."""
    return tuple(grid) if grid and all(type(d) is int for d in grid) else None


def hierarchical(found_stages: list[Stage]) -> bool:
    """Whether the stages shrink the token grid (Swin, PVT): timm gives such models' features
    as images ([B, H, W, C] for Swin), a plain ViT's (one grid throughout) as tokens."""
    grids = {s.grid for s in found_stages if s.grid}
    return len(grids) > 1


def interface_facts(facts: ModelFacts) -> InterfaceFacts:
    """The plain values the timm-style methods read (model_interface.py), from `facts`."""
    h = facts.head
    classifier = {} if h is None else dict(head=h.path, head_layers=h.classifier.layers, head_width=h.width,
                                           pre_logits=h.classifier.pre_logits, grid=h.grid, prefix=h.prefix,
                                           features_fmt=h.features_fmt, final_norm=h.final_norm)
    return InterfaceFacts(**classifier, stages=tuple((s.path, int_grid(s.grid), s.prefix) for s in facts.stages),
                          blocks=facts.blocks, layers=facts.layers, coarse_layers=facts.coarse_layers)


def layers(graph: Graph, units: list[str]) -> dict[str, tuple]:
    """Module path -> layer ordinal (as timm's group matchers give): the stem (0,); unit k of
    `units` (1, k); a node between units belongs to the next one; a node after the last unit to
    the last one (merged: the MERGE_WITH_PREVIOUS suffix); the head to no layer (left out)."""
    owner = {}
    for k, unit in enumerate(units):
        owner[unit] = k
    order: dict[str, tuple] = {}
    pending: list[str] = []
    seen_unit = None
    classifier = head(graph)
    head_path = classifier.path if classifier else None
    for name in network_nodes(graph):
        unit = next((u for u in units if name.startswith(u + ".")), None)
        if unit is not None:
            order[unit] = (1, owner[unit])
            for waiting in pending:
                order[waiting] = (1, owner[unit])
            pending, seen_unit = [], unit
        elif name == head_path:
            continue
        elif seen_unit is None:
            order[name] = (0,)
        else:
            pending.append(name)
    for waiting in pending:  # after the last unit: part of the last layer
        order[waiting] = (1, owner[seen_unit], MERGE_WITH_PREVIOUS)
    return order
