"""What generate()'s key/value cache costs, from the checked graph (no torch): per attention
layer that decodes with a cache (kinds causal, sliding and alibi that the target tokens reach), keys
and values of its key/value heads, 2 x kv_heads x head_dim numbers per token, in fp32 (4 bytes)
and bf16 (2 bytes), and at the layer's longest sequence (its length dim at its largest). An
encoder-decoder's cross attention keeps the keys and values of the source (its memory) for the
whole decode, the same numbers per source token: `cross_layers`, reported beside. Grouped- and multi-query
attention cache only their key/value heads. A sliding layer keeps a ring buffer of its window
only, so at the longest sequence it holds `window` tokens (as compiler/generate/ allocates)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.ir import Graph

CACHED_KINDS = ("causal", "sliding", "alibi")
PRECISIONS = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class CachedLayer:
    path: str
    kind: str
    kv_heads: int
    head_dim: int
    max_length: int  # the longest sequence the layer sees
    window: int | None = None  # a sliding layer's: the tokens it keeps

    @property
    def held(self) -> int:
        """Tokens held at the longest sequence."""
        return self.max_length if self.window is None else min(self.window, self.max_length)

    @property
    def numbers_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim  # a key and a value per key/value head

    def to_json(self) -> dict:
        per_token = {p: self.numbers_per_token * size for p, size in PRECISIONS.items()}
        return {"path": self.path, "kind": self.kind, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "bytes_per_token": per_token, "max_length": self.max_length, "window": self.window,
                "bytes_at_max_length": {p: b * self.held for p, b in per_token.items()}}


def generates(graph: Graph) -> bool:
    """Whether generate() can decode with the spec (compiler/generate/driver.py says why not):
    an lm head's logits among its outputs (logits_output), and token ids alone (every attention cached) or
    source ids (with T5's padding mask between, optionally) and target ids (attention the
    target reaches cached, or cross attention); every input int64 ids (not an audio source)."""
    inputs = graph.inputs()
    if len(inputs) not in (1, 2, 3) or logits_output(graph) is None:
        return False
    if any(node.type.layout != "ids" for node in inputs):  # an audio or image source: generate feeds ids
        return False
    reached = target_side(graph, inputs[-1].name)
    allowed = CACHED_KINDS + (("cross",) if len(inputs) > 1 else ())
    attention = [n for n in graph.nodes() if not n.is_input and n.op.primitive == "attention" and n.name in reached]
    return (any(n.op.kind in CACHED_KINDS for n in attention) and all(n.op.kind in allowed for n in attention)
            and (len(inputs) > 1 or len(attention) == len(attention_nodes(graph))))


def logits_output(graph: Graph) -> tuple[int, str] | None:
    """(index among the outputs, lm head node) of the first output that is an lm head's logits:
    the head itself, or an `add` of it and params (BART's `final_logits_bias`, a buffer)."""
    for index, output in enumerate(graph.outputs):
        head = lm_head_of(graph, output.node)
        if head is not None:
            return index, head
    return None


def lm_head_of(graph: Graph, name: str) -> str | None:
    node = graph.record(name)
    if is_lm_head(node):
        return node.name
    if node.is_input or node.op.primitive != "add":
        return None
    heads = [n for n in graph.inputs_of(name) if is_lm_head(graph.record(n))]
    others = [graph.record(n) for n in graph.inputs_of(name) if n not in heads]
    if len(heads) == 1 and all(not n.is_input and n.op.primitive == "param" for n in others):
        return heads[0]
    return None


def is_lm_head(node) -> bool:
    return not node.is_input and node.op.primitive == "head" and node.op.kind == "lm"


def attention_nodes(graph: Graph) -> list:
    return [n for n in graph.nodes() if not n.is_input and n.op.primitive == "attention"]


def target_side(graph: Graph, target: str) -> set[str]:
    """The nodes whose value depends on the target ids (node order is a topological order)."""
    reached = {target}
    for node in graph.nodes():
        if any(name in reached for name in node.inputs):
            reached.add(node.name)
    return reached


def cached_layers(graph: Graph, kinds=CACHED_KINDS) -> list[CachedLayer]:
    """The attention layers of `kinds` generate() caches, in node order (none for a spec it
    cannot decode): by default the self-attention ones; cross_layers for the cross ones."""
    if not generates(graph):
        return []
    layers, reached = [], target_side(graph, graph.inputs()[-1].name)
    for node in attention_nodes(graph):
        if node.op.kind not in kinds or node.name not in reached:
            continue
        p, x = node.params, graph.type_of(node.inputs[0])
        keys = graph.type_of(node.inputs[1]) if node.op.kind == "cross" else x  # cross: the memory's length
        length = keys.length if isinstance(keys.length, int) else keys.length.hi
        layers.append(CachedLayer(node.name, node.op.kind, p.kv_heads or p.heads, node.op.head_dim(p, x.channels),
                                  length, getattr(p, "window", None) if node.op.kind == "sliding" else None))
    return layers


def cross_layers(graph: Graph) -> list[CachedLayer]:
    """An encoder-decoder's cross attention layers: each keeps the source's keys and values
    (per source token, up to the longest source) while generate() decodes."""
    return cached_layers(graph, ("cross",))


def summary(layers: list[CachedLayer], cross: list[CachedLayer] = ()) -> dict | None:
    """The whole cache for --json: bytes per token and at the longest sequence (fp32, bf16), and
    each layer's, and the same for the cross layers' source keys and values (None for a
    decoder-only spec); None when nothing is cached."""
    if not layers:
        return None
    found = totals(layers)
    found["cross_layers"] = totals(cross) if cross else None
    return found


def totals(layers: list[CachedLayer]) -> dict:
    per_token = {p: sum(l.numbers_per_token for l in layers) * size for p, size in PRECISIONS.items()}
    at_max = {p: sum(l.numbers_per_token * l.held for l in layers) * size for p, size in PRECISIONS.items()}
    return {"bytes_per_token": per_token, "max_length": max(l.max_length for l in layers),
            "bytes_at_max_length": at_max, "layers": [l.to_json() for l in layers]}


def line(layers: list[CachedLayer], cross: list[CachedLayer] = ()) -> str | None:
    """One line for the table (with a clause on the cross layers' source cache), or None when nothing is cached."""
    found = summary(layers, cross)
    if found is None:
        return None
    per, at = found["bytes_per_token"], found["bytes_at_max_length"]
    text = (f"KV cache (generate, {len(layers)} layers): {size(per['fp32'])} per token, {size(at['fp32'])} at "
            f"{found['max_length']:,} tokens (fp32); {size(per['bf16'])}, {size(at['bf16'])} (bf16)")
    if cross:
        source = found["cross_layers"]
        text += (f"; the source's keys and values for {len(cross)} cross attention layers: "
                 f"{size(source['bytes_per_token']['fp32'])} per source token, "
                 f"{size(source['bytes_at_max_length']['fp32'])} at {source['max_length']:,} (fp32)")
    return text


def size(n: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
