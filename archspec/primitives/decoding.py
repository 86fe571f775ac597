"""What generate() and the model interface ask of every op, as facts registered from the op's
own rule file beside its shape rule (facts.py):

    DECODE.register(CAUSAL, SelfCache())                       # attention/causal.py
    DECODE.register(SLIDING, SelfCache(window=lambda p: p.window))
    DECODE.register(CONV, conv_decoding)   # RecentInputs when causal, else Mixes("a conv reads ...")
    ROLE.register(LM_HEAD, LOGITS)                              # head/lm.py

DECODE  how the op behaves when generate() brings the tokens one at a time after the prompt:
        `Tokenwise` (each output token reads only the same token of its inputs: linear, norms,
        the mlp), `Positional` (tokenwise, and reads each token's position, which generate
        gives: embed, relative_bias), `SelfCache` (reads earlier tokens through a cache of their
        keys and values, all or the last `window`: causal attention), `CrossCache` (reads a
        memory whose keys and values are made once: cross attention), `RecentInputs` (reads the
        last few inputs before each token, kept as a rolling state: a causal 1-D conv, LFM2's
        and Mamba's short conv), `NoTokens` (reads no
        tokens: param, constant), or `Mixes(why)` (an output token reads other tokens and keeps
        no cache: a spec whose target side holds one cannot generate, and the refusal names the
        node and says why). A function of the node's params may stand for any of these.
ROLE    what the op's output is to a user of the model: LOGITS (an lm head's logits over the
        vocabulary: generate and training's loss read them), CLASSES (a classifier's logits),
        FEATURES (pooled or projected features), or None.

Every op registers both (tests/core/test_facts.py walks the registry); a lookup nobody
registered fails naming the op, never a silent default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .base import Op
from .facts import Fact

WHERE = "the op's rule file (archspec/primitives/ops/<op>.py, or a plugin's), beside its shape rule"


class Decode:
    """One answer of DECODE."""


@dataclass(frozen=True)
class Tokenwise(Decode):
    """Each output token reads only the same token of its inputs."""


@dataclass(frozen=True)
class Positional(Decode):
    """Tokenwise, and reads each token's position (generate gives the positions)."""


@dataclass(frozen=True)
class SelfCache(Decode):
    """Reads the earlier tokens through a cache of their keys and values; `window(params)`, when
    given, is how many tokens a layer keeps (a sliding window), else all. `entry(params, width)`,
    when given, is what the layer caches per token, (heads, key width, value width): a latent
    attention caches its latent and rotary key (attention/latent.py); else the sequence kinds'
    key/value heads of head_dim each. `key_padding(params)`, when given, says whether the node's
    last input is a key-padding mask [B, L] (1 keeps a key, 0 hides it): while decoding the
    cache's own mask (generate's attention_mask) hides the padded keys, so an input that only
    such slots read is no input generate feeds (kv_cache.padding_inputs). `refill(params)`, when
    given, is the sequence length at which every key the layer holds must be computed again, or
    None: LongRoPE rotates all keys with its long factors once the sequence passes its original
    length (Hugging Face's Phi-3 drops its cache there), so generate() runs the whole sequence
    through the prefill at that length (compiler/generate/driver.py, Decoder.refills)."""

    window: Callable | None = None
    entry: Callable | None = None
    key_padding: Callable | None = None
    refill: Callable | None = None
    entry_of_types: Callable | None = None  # (params, input types) -> the entry, or None: `entry`'s (external q/k/v)

    def window_of(self, params) -> int | None:
        return None if self.window is None else self.window(params)

    def refill_of(self, params) -> int | None:
        return None if self.refill is None else self.refill(params)

    def reads_key_padding(self, params) -> bool:
        return self.key_padding is not None and bool(self.key_padding(params))

    def entry_of(self, op, params, width: int, types=None) -> tuple[int, int, int]:
        """(heads, key width, value width) cached per token; `types`, the node's input types, where
        the entry depends on them (`entry_of_types`: external projections, the widths of k and v)."""
        if self.entry_of_types is not None and types is not None:
            found = self.entry_of_types(params, types)
            if found is not None:
                return found
        if self.entry is not None:
            return self.entry(params, width)
        head = op.head_dim(params, width)
        return params.kv_heads or params.heads, head, head


@dataclass(frozen=True)
class CrossCache(Decode):
    """Reads a memory (an encoder's output) whose keys and values are made once per source."""


@dataclass(frozen=True)
class RecentInputs(Decode):
    """Reads, besides each token's own input, the inputs of the `count(params)` tokens before it
    (a causal 1-D conv: (kernel - 1) * dilation), kept while decoding as a rolling state of the
    last `count` inputs [B, count, C], the same size at every step (Hugging Face's conv state).
    `key_padding(params)`, when given, says whether its last input is a padding mask [B, L], which
    generate does not feed (its own attention_mask marks the padding: kv_cache.padding_inputs)."""

    count: Callable
    key_padding: Callable | None = None  # (params) -> whether its last input is a padding mask [B, L] (SelfCache's)

    def count_of(self, params) -> int:
        return self.count(params)

    def reads_key_padding(self, params) -> bool:
        return self.key_padding is not None and bool(self.key_padding(params))


@dataclass(frozen=True)
class NoTokens(Decode):
    """Reads no tokens (a parameter or a constant)."""


@dataclass(frozen=True)
class Mixes(Decode):
    """An output token reads other tokens and the op keeps no cache; `why` says so in words."""

    why: str


@dataclass(frozen=True)
class ByTypes(Decode):
    """An answer the params alone cannot give, decided from them and the types of the node's
    inputs (`decide(params, input types)` gives one of the others): an einsum or a rearrange
    keeps each token's values apart when every token axis is one name that the output keeps.
    Without the types (a node outside a checked graph) it is `Mixes(why)`."""

    decide: Callable
    why: str


TOKENWISE, POSITIONAL, NO_TOKENS = Tokenwise(), Positional(), NoTokens()
LOGITS, CLASSES, FEATURES = "logits", "classes", "features"
ROLES = (LOGITS, CLASSES, FEATURES, None)

DECODE = Fact("DECODE", "how the op behaves when generate() feeds the tokens one at a time (Tokenwise, "
              "Positional, SelfCache, CrossCache, NoTokens, Mixes(why), or a function of the params giving one)",
              WHERE)
ROLE = Fact("ROLE", "what the op's output is to a user of the model: LOGITS, CLASSES, FEATURES or None", WHERE)


def register_decoding(op: Op, decode, role=None) -> Op:
    """Register both facts of `op` (`role` None: its output is no head's)."""
    if not isinstance(decode, Decode) and not callable(decode):
        raise ValueError(f"{op.label}: DECODE is a Decode or a function of the params, got {decode!r}")
    if role not in ROLES:
        raise ValueError(f"{op.label}: ROLE is one of {ROLES}, got {role!r}")
    DECODE.register(op, decode)
    ROLE.register(op, role)
    return op


def decode_of(node) -> Decode:
    """DECODE's answer for an IR node (a function of the params applied to the node's; ByTypes
    given the node's input types too, where the node is a graph's NodeView)."""
    answer = DECODE.of(node.op, node)
    answer = answer if isinstance(answer, Decode) else answer(node.params)
    if not isinstance(answer, ByTypes):
        return answer
    graph = getattr(node, "graph", None)
    if graph is None:
        return Mixes(answer.why)
    return answer.decide(node.params, [graph.type_of(name) for name in node.inputs])


def token_length(size) -> bool:
    """Whether an axis of this size is a sequence's tokens: a symbolic size other than the batch
    (a spec whose length is fixed cannot tell its tokens' axis from another of that size)."""
    from ..core.types import Sym, batch_factor

    return isinstance(size, Sym) and batch_factor(size) is None


def kept_token_axis(sides, types, output_names) -> bool:
    """Whether every token axis of the inputs (`sides`: each input's axis names, in order, one per
    dim; `types`: their types) is one name, which `output_names` keeps, not last: the op then
    reads each token's values alone, and the ops after it, tokenwise along the last axis only
    (reduce, softmax, slice), still are."""
    token = None
    for names, x in zip(sides, types):
        if len(names) != len(x.shape):
            return False
        for name, size in zip(names, x.shape):
            if token_length(size):
                if token not in (None, name):
                    return False
                token = name
            elif name == token:
                return False
    if token is None or token not in output_names or output_names[-1] == token:
        return False
    return all(token not in names or names.count(token) == 1 for names in sides)


def role_of(node) -> str | None:
    return None if node.is_input else ROLE.of(node.op, node)


def channels_only(what: str) -> Callable:
    """DECODE of an op that works along one axis: tokenwise along the channels (the last axis),
    otherwise `what` mixes the tokens."""

    def decode(params) -> Decode:
        return TOKENWISE if params.along in ("channels", -1) else Mixes(f"{what} joins or splits the tokens")

    return decode
