"""What the model's timm-style interface (model.py) needs to know about the spec, read off the
IR at lowering and kept in `model.meta["archspec"]`: the classifier head, the blocks (the
innermost repetitions), the stages (the repetitions of the first repeat) and the layer of
every module for layer-wise learning-rate decay."""

from __future__ import annotations

from archspec.core.ir import Graph

OBJECTIVES = "objectives"
HEAD_KINDS = ("classify", "distilled")
MERGE_WITH_PREVIOUS = 99999  # timm's ordinal suffix for "the same layer as the one before"


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


def stages(graph: Graph) -> list[dict]:
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
        out.append({"path": path, "node": last, "grid": list(t.grid) if t.grid else None, "prefix": t.prefix,
                    "shape": [d if isinstance(d, int) else str(d) for d in t.shape]})
    return out


def head(graph: Graph) -> dict | None:
    """The classifier: a top-level head of kind classify or distilled that the model returns."""
    returned = {o.node for o in graph.outputs}
    for name in network_nodes(graph):
        node = graph.record(name)
        if "." not in name and node.op.primitive == "head" and node.op.kind in HEAD_KINDS and name in returned:
            (source,) = graph.inputs_of(name)
            return {"path": name, "kind": node.op.kind, "width": graph.type_of(source).channels, "reads": source}
    return None


def layers(graph: Graph, units: list[str]) -> dict[str, list]:
    """Module path -> layer ordinal (as timm's group matchers give): the stem (0,); unit k of
    `units` (1, k); a node between units belongs to the next one; a node after the last unit to
    the last one (merged: the MERGE_WITH_PREVIOUS suffix); the head to no layer (left out)."""
    owner = {}
    for k, unit in enumerate(units):
        owner[unit] = k
    order: dict[str, list] = {}
    pending: list[str] = []
    seen_unit = None
    head_path = (head(graph) or {}).get("path")
    for name in network_nodes(graph):
        unit = next((u for u in units if name.startswith(u + ".")), None)
        if unit is not None:
            order[unit] = [1, owner[unit]]
            for waiting in pending:
                order[waiting] = [1, owner[unit]]
            pending, seen_unit = [], unit
        elif name == head_path:
            continue
        elif seen_unit is None:
            order[name] = [0]
        else:
            pending.append(name)
    for waiting in pending:  # after the last unit: part of the last layer
        order[waiting] = [1, owner[seen_unit], MERGE_WITH_PREVIOUS]
    return order


def interface_meta(graph: Graph) -> dict:
    found_stages = stages(graph)
    found_blocks = blocks(graph)
    return {"head": head(graph), "blocks": found_blocks, "stages": found_stages,
            "layers": layers(graph, found_blocks), "coarse_layers": layers(graph, [s["path"] for s in found_stages])}
