"""Whether generate() can decode a checked graph, and what its key/value cache costs (no torch),
from each op's DECODE and ROLE facts (decoding.py): per layer that decodes with a cache of its
own keys and values (DECODE `SelfCache`) that the target tokens reach, keys
and values of its key/value heads, 2 x kv_heads x head_dim numbers per token (a latent
attention layer: its latent and rotary key, kv_rank + rope_dim, the SelfCache's `entry`), in fp32 (4 bytes)
and bf16 (2 bytes), and at the layer's longest sequence (its length dim at its largest). An
encoder-decoder's cross attention keeps the keys and values of the source (its memory) for the
whole decode, the same numbers per source token: `cross_layers`, reported beside. Grouped- and multi-query
attention cache only their key/value heads. A sliding layer keeps a ring buffer of its window
only, so at the longest sequence it holds `window` tokens (as compiler/generate/ allocates)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.ir import Graph
from ..core.words import plural
from .decoding import LOGITS, CrossCache, Mixes, Positional, RecentInputs, SelfCache, Tokenwise, decode_of, role_of

PRECISIONS = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class CachedLayer:
    path: str
    kind: str
    kv_heads: int
    head_dim: int
    max_length: int  # the longest sequence the layer sees
    window: int | None = None  # a sliding layer's: the tokens it keeps
    value_dim: int | None = None  # the values' width where it differs from the keys' (a latent layer's rotary key)
    refill: int | None = None  # the sequence length at which all its keys are computed again (LongRoPE), or None

    @property
    def held(self) -> int:
        """Tokens held at the longest sequence."""
        return self.max_length if self.window is None else min(self.window, self.max_length)

    @property
    def numbers_per_token(self) -> int:
        value = self.head_dim if self.value_dim is None else self.value_dim
        return self.kv_heads * (self.head_dim + value)  # a key and a value per key/value head

    def to_json(self) -> dict:
        per_token = {p: self.numbers_per_token * size for p, size in PRECISIONS.items()}
        return {"path": self.path, "kind": self.kind, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "value_dim": self.head_dim if self.value_dim is None else self.value_dim,
                "bytes_per_token": per_token, "max_length": self.max_length, "window": self.window,
                "bytes_at_max_length": {p: b * self.held for p, b in per_token.items()}}


def generates(graph: Graph) -> bool:
    """Whether generate() can decode with the spec through a cache (`refusal` says why not)."""
    return refusal(graph) is None


def refusal(graph: Graph) -> tuple[str | None, str] | None:
    """None when generate() can decode the spec through a cache, else (the node in the way or
    None, why). Where only the cache is refused (`uncached_refusal` is None), generate() runs the
    whole sequence through forward at each step instead."""
    return decoding(graph)[0]


def uncached_refusal(graph: Graph) -> tuple[str | None, str] | None:
    """None when generate() can run the spec at all (without a cache: the whole sequence through
    forward each step), else why not: its inputs are not what generate feeds, or none of its
    outputs is an lm head's logits."""
    return fed_and_logits(graph, fed_inputs(graph))


def decoding(graph: Graph) -> tuple[tuple[str | None, str] | None, set[str]]:
    """(refusal, the nodes generate() runs one token at a time), the lm head's logits found once.
    generate() needs an lm head's logits among its outputs (ROLE LOGITS), token ids alone
    (decoder-only) or a source (ids, or any tensor: audio features, an image; with T5's padding
    mask between, optionally) and target ids;
    every node the target ids reach decodes one token at a time (DECODE: tokenwise, positional, a
    self cache, or, with a source, a cross cache), at least one with a self cache; what a
    tokenwise node reads besides the target side holds no run of tokens (a fixed table of
    positions would not line up)."""
    inputs = fed_inputs(graph)
    structural = fed_and_logits(graph, inputs)
    if structural is not None:
        return structural, set()
    reached, cached = decoded(graph, logits_output(graph), inputs[-1].name), 0
    for node in graph.nodes():
        if node.is_input or node.name not in reached:
            continue
        decode = decode_of(node)
        if isinstance(decode, Mixes):
            return (node.name, decode.why), reached
        if isinstance(decode, CrossCache) and len(inputs) == 1:
            return (node.name, "cross attention reads a memory, and a decoder-only spec has none"), reached
        cached += isinstance(decode, SelfCache | RecentInputs)
        fixed = [n for n in graph.inputs_of(node.name) if n not in reached and spans_tokens(graph.type_of(n))]
        if fixed and isinstance(decode, Tokenwise | Positional):
            return (node.name, f"it reads '{fixed[0]}', {graph.type_of(fixed[0]).length} tokens made apart from the "
                               "target, which do not line up with the tokens generate brings one at a time"
                               + taken_for_target(inputs)), reached
    if not cached:
        return (None, "nothing the target ids reach keeps a cache of earlier tokens (causal, sliding, alibi or "
                      "latent attention, or a causal conv)"), reached
    return None, reached


def without_cache(graph: Graph) -> str | None:
    """Why generate() decodes the spec without a cache, in words ('node': why), where it runs it
    at all; None where it keeps a cache, or cannot generate."""
    if uncached_refusal(graph) is not None or len(fed_inputs(graph)) != 1:  # an encoder-decoder is refused instead
        return None
    why = refusal(graph)
    if why is None:
        return None
    node, words = why
    return f"'{node}': {words}" if node else words


def fed_and_logits(graph: Graph, inputs) -> tuple[str | None, str] | None:
    """Why generate() cannot run the spec even without a cache (its inputs, its outputs), or None."""
    if len(inputs) not in (1, 2, 3):
        return (None, f"it takes {len(inputs)} inputs besides padding masks; generate feeds token ids (decoder-only), "
                      "or source ids, optionally the source's padding mask, and target ids (encoder-decoder)")
    if logits_output(graph) is None:
        return (None, "none of its outputs is an lm head's logits (a `head: {kind: lm}` node it returns, alone or "
                      "through tokenwise ops with a bias or a scale)")
    fed_ids = inputs[1:] if len(inputs) > 1 else inputs  # an encoder-decoder's source may be any tensor
    not_ids = [node for node in fed_ids if node.type.layout != "ids"]
    if not_ids:  # before any op is asked how it decodes
        return (not_ids[0].name, "it is not token ids [B, L] (generate feeds token ids: a decoder-only spec's "
                                 "input, an encoder-decoder's target)")
    return read_beside_the_target(graph, inputs)


def read_beside_the_target(graph: Graph, inputs) -> tuple[str | None, str] | None:
    """Why a spec of several inputs is no encoder-decoder generate() can feed: a node the target
    ids reach reads another input itself, token for token (RoFormer's token_type_ids beside its
    input_ids), where an encoder-decoder's source reaches the target side only through cross
    attention (its memory and that memory's padding mask). None: one input, or a source read so."""
    if len(inputs) == 1:
        return None
    target = inputs[-1].name
    sources = {node.name for node in inputs[:-1]}
    reached = target_side(graph, target)
    for node in graph.nodes():  # in node order: the first such node is named
        if node.is_input or node.name not in reached:
            continue
        name = node.name
        read, decode = [n for n in graph.inputs_of(name) if n in sources], decode_of(node)
        if read and isinstance(decode, Mixes):  # a node that cannot decode anyway: its own reason
            return (name, decode.why)  # (a blockwise part's block ids beside the prompt)
        if read and not isinstance(decode, CrossCache):
            return (name, f"it reads '{read[0]}' and '{target}' together, token for token: generate feeds a "
                          "decoder-only spec one input of token ids (and an attention_mask it reads as padding), and "
                          "an encoder-decoder's source reaches its decoder only through cross attention; to "
                          "generate, leave the other input out (token types: their row 0 as a `param` added to the "
                          "embeddings)")
    return None


def taken_for_target(inputs) -> str:
    """What a refusal adds for a spec of several inputs: which one generate took for the target."""
    if len(inputs) == 1:
        return ""
    return (f" (of its {len(inputs)} inputs generate takes '{inputs[-1].name}' for an encoder-decoder's target ids; "
            "an attention_mask is no input generate feeds unless only causal attention and causal convs read it, "
            "each as its `padding_mask`)")


def spans_tokens(t) -> bool:
    """A tensor of several tokens (a fixed table over the sequence, not one broadcast row)."""
    return t.layout == "tokens" and t.length != 1


def logits_output(graph: Graph) -> tuple[int, str] | None:
    """(index among the outputs, lm head node) of the first output that is an lm head's logits:
    the head itself, or what tokenwise ops make of them with tensors of one row (BART's
    `final_logits_bias`, Gemma 2's final soft-cap)."""
    heads = lm_heads(graph)
    for index, output in enumerate(graph.outputs):
        if heads.get(output.node):
            return index, heads[output.node]
    return None


def lm_heads(graph: Graph) -> dict[str, str]:
    """For each node, the lm head whose logits it is (None: not an lm head's logits), in one pass
    in node order: an lm head is its own; a tokenwise node (DECODE) gives its one input's head
    when what else it reads holds one row (a bias, a scale)."""
    found: dict[str, str | None] = {}
    for node in graph.nodes():
        if node.is_input:
            found[node.name] = None
        elif is_lm_head(node):
            found[node.name] = node.name
        else:  # DECODE asked only of what reads an lm head's logits
            heads = {found.get(n) for n in graph.inputs_of(node.name)} - {None}
            others = [graph.type_of(n) for n in graph.inputs_of(node.name) if found.get(n) is None]
            one_row = all(t.shape[0] == 1 and not spans_tokens(t) for t in others)
            keeps = len(heads) == 1 and one_row and isinstance(decode_of(node), Tokenwise)
            found[node.name] = heads.pop() if keeps else None
    return found


def is_lm_head(node) -> bool:
    return role_of(node) == LOGITS


def decoded(graph: Graph, logits: tuple[int, str], target: str) -> set[str]:
    """The nodes generate() runs one token at a time: those the `target` ids reach that the logits
    (logits_output's) depend on (a loss, or another output, is not decoded)."""
    return target_side(graph, target) & graph.ancestors([graph.outputs[logits[0]].node])


def fed_inputs(graph: Graph) -> list:
    """The inputs generate() feeds (token ids): all but the padding inputs (padding_inputs)."""
    padding = padding_inputs(graph)
    return [node for node in graph.inputs() if node.name not in padding]


def padding_inputs(graph: Graph) -> tuple[str, ...]:
    """The inputs that only cached self attention (or a causal conv) reads, each time as its
    key-padding mask (its last input; SelfCache's and RecentInputs' key_padding): a decoder-only
    spec's attention_mask [B, L]. generate()
    feeds none of them: its own attention_mask marks the padding, and the cache's mask hides the
    padded keys (the decode graph hands those slots a stand-in no layer reads)."""
    return ids_read_only_so(graph, reads_only_as_key_padding)


def mask_inputs(graph: Graph) -> tuple[str, ...]:
    """The int64 inputs every reader of which takes as its key-padding mask (its last input, with
    `padding_mask: true`), cached attention or not: an encoder's attention_mask (ModernBERT's,
    BERT's), which generate must not take for an encoder-decoder's target ids."""
    return ids_read_only_so(graph, reads_as_a_padding_mask)


def ids_read_only_so(graph: Graph, reads) -> tuple[str, ...]:
    """The int64 inputs (a padding mask is int64 [B, L]; no other input's readers are asked) that
    have readers, each of which `reads(graph, reader, name)` so."""
    found = []
    for node in graph.inputs():
        readers = graph.readers(node.name) if node.type.layout == "ids" else ()
        if readers and all(reads(graph, reader, node.name) for reader in readers):
            found.append(node.name)
    return tuple(found)


def reads_as_a_padding_mask(graph: Graph, reader: str, name: str) -> bool:
    """Node `reader` reads `name` once, last, with `padding_mask: true`."""
    return last_input_once(graph, reader, name) and bool(getattr(graph.record(reader).params, "padding_mask", False))


def last_input_once(graph: Graph, reader: str, name: str) -> bool:
    """Node `reader` reads `name` once, as its last input."""
    slots = graph.inputs_of(reader)
    return slots.count(name) == 1 and slots[-1] == name


def reads_only_as_key_padding(graph: Graph, reader: str, name: str) -> bool:
    """Node `reader` reads `name` once, as the key-padding mask of a cached self attention or of
    a causal conv."""
    if not last_input_once(graph, reader, name):
        return False
    node = graph.record(reader)
    decode = decode_of(node)
    return isinstance(decode, SelfCache | RecentInputs) and decode.reads_key_padding(node.params)


def target_side(graph: Graph, target: str) -> set[str]:
    """The nodes whose value depends on the target ids (node order is a topological order)."""
    reached = {target}
    for node in graph.nodes():
        if any(name in reached for name in node.inputs):
            reached.add(node.name)
    return reached


def decoded_as(graph: Graph, kind: type):
    """(node, its DECODE answer) of each node generate() runs one token at a time whose answer is
    a `kind` (SelfCache, CrossCache, RecentInputs), in node order; none for a spec it cannot
    decode through a cache."""
    why, reached = decoding(graph)
    if why is not None:
        return
    for node in graph.nodes():
        if not node.is_input and node.name in reached:
            decode = decode_of(node)
            if isinstance(decode, kind):
                yield node, decode


def cached_layers(graph: Graph, cache: type = SelfCache) -> list[CachedLayer]:
    """The layers whose DECODE is `cache` (SelfCache: their own keys and values; CrossCache: a
    memory's) that generate() keeps while decoding, in node order (none for a spec it cannot
    decode)."""
    layers = []
    for node, decode in decoded_as(graph, cache):
        p, x = node.params, graph.type_of(node.inputs[0])
        keys = graph.type_of(node.inputs[1]) if cache is CrossCache else x  # cross: the memory's length
        length = keys.length if isinstance(keys.length, int) else keys.length.hi
        refill = None
        if isinstance(decode, SelfCache):
            heads, key, value = decode.entry_of(node.op, p, x.channels, [graph.type_of(n) for n in node.inputs])
            window, refill = decode.window_of(p), decode.refill_of(p)
        else:  # cross attention: the memory's keys and values, the sequence kinds'
            heads, key, value, window = p.kv_heads or p.heads, node.op.head_dim(p, x.channels), None, None
        layers.append(CachedLayer(node.name, node.op.kind, heads, key, length, window,
                                  None if value == key else value, refill))
    return layers


@dataclass(frozen=True)
class RecentLayer:
    """A layer that keeps the inputs of its last `count` tokens while decoding (DECODE
    RecentInputs: a causal conv), `channels` numbers each, whatever the sequence's length."""

    path: str
    channels: int
    count: int

    @property
    def numbers(self) -> int:
        return self.channels * self.count

    def to_json(self) -> dict:
        return {"path": self.path, "channels": self.channels, "tokens": self.count,
                "bytes": {p: self.numbers * size for p, size in PRECISIONS.items()}}


def recent_layers(graph: Graph) -> list[RecentLayer]:
    """The layers that keep their last inputs while generate() decodes (RecentInputs), in node
    order (none for a spec it cannot decode through a cache)."""
    return [RecentLayer(node.name, graph.type_of(node.inputs[0]).channels, decode.count_of(node.params))
            for node, decode in decoded_as(graph, RecentInputs)]


def cross_layers(graph: Graph) -> list[CachedLayer]:
    """An encoder-decoder's cross attention layers: each keeps the source's keys and values
    (per source token, up to the longest source) while generate() decodes."""
    return cached_layers(graph, CrossCache)


def summary(layers: list[CachedLayer], cross: list[CachedLayer] = (), recent: list[RecentLayer] = ()) -> dict | None:
    """The whole cache for --json: bytes per token and at the longest sequence (fp32, bf16), and
    each layer's, the same for the cross layers' source keys and values (None for a
    decoder-only spec), and the recent inputs the causal convs keep (`recent_inputs`: bytes,
    whatever the length, and each layer's; None without one); None when nothing is cached."""
    if not layers and not recent:
        return None
    found = totals(layers) if layers else {"bytes_per_token": {p: 0 for p in PRECISIONS}, "max_length": None,
                                           "bytes_at_max_length": {p: 0 for p in PRECISIONS}, "layers": []}
    found["cross_layers"] = totals(cross) if cross else None
    found["recent_inputs"] = ({"bytes": {p: sum(r.numbers for r in recent) * size for p, size in PRECISIONS.items()},
                               "layers": [r.to_json() for r in recent]} if recent else None)
    return found


def totals(layers: list[CachedLayer]) -> dict:
    per_token = {p: sum(l.numbers_per_token for l in layers) * size for p, size in PRECISIONS.items()}
    at_max = {p: sum(l.numbers_per_token * l.held for l in layers) * size for p, size in PRECISIONS.items()}
    return {"bytes_per_token": per_token, "max_length": max(l.max_length for l in layers),
            "bytes_at_max_length": at_max, "layers": [l.to_json() for l in layers]}


def line(layers: list[CachedLayer], cross: list[CachedLayer] = (), recent: list[RecentLayer] = ()) -> str | None:
    """One line for the table (with clauses on the cross layers' source cache and the causal
    convs' recent inputs), or None when nothing is cached."""
    found = summary(layers, cross, recent)
    if found is None:
        return None
    per, at = found["bytes_per_token"], found["bytes_at_max_length"]
    windowed = any(layer.window is not None for layer in layers)
    upto = f"up to {size(per['fp32'])} per token (a sliding layer keeps its window)" if windowed else \
        f"{size(per['fp32'])} per token"  # the Cohere2 trial read a sliding layer's per-token cost as kept forever
    text = (f"KV cache (generate, {plural(len(layers), 'layer')}): {upto}, {size(at['fp32'])} at "
            f"{found['max_length']:,} tokens (fp32); {size(per['bf16'])}, {size(at['bf16'])} (bf16)"
            if layers else "KV cache (generate): none")
    if recent:
        kept = found["recent_inputs"]["bytes"]
        text += (f"; the last inputs of {plural(len(recent), 'causal conv layer')}: {size(kept['fp32'])} at any length "
                 f"(fp32), {size(kept['bf16'])} (bf16)")
    if cross:
        source = found["cross_layers"]
        text += (f"; the source's keys and values for {plural(len(cross), 'cross attention layer')}: "
                 f"{size(source['bytes_per_token']['fp32'])} per source token, "
                 f"{size(source['bytes_at_max_length']['fp32'])} at {source['max_length']:,} (fp32)")
    return text


def size(n: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
