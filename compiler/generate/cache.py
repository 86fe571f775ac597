"""The caches generate() keeps while it runs (see compiler/generate/__init__.py), handed to the
model as one object, an argument, never set on its modules.

`DecodeState` is what every layer shares for one generate() call: the preallocated capacity
(prompt + new tokens), which cache slots hold a real token (the attention mask, 0 for left
padding), where the tokens of the current call go (`start`) and their positions (Hugging
Face's: the attention mask's running count, 0 for padding).

`KVCache` is one attention layer's cache: keys and values [B, h_kv, capacity, d] (only the
key/value heads: grouped- and multi-query attention cache h_kv heads, and share them after
reading), written at `start` and read up to the tokens seen so far; a sliding window shorter
than the capacity keeps a ring buffer of its last `window` slots only. A latent attention layer
(attention/latent.py, DeepSeek's MLA) hands its work to `KVCache.attend_latent`: its cache holds
the latent [B, 1, capacity, kv_rank] as the keys and the rotated rotary key [B, 1, capacity,
rope_dim] as the values, expanded to every head's keys and values at each step; the other
kinds (attention/sequence.py's SelfAttention whose mask rule decodes: causal, sliding, alibi) to
`KVCache.attend`.

`DecodeCache` holds all of it for one call: the state, each cached layer's KVCache and each
cross attention layer's projected memory (a KeptMemory), both by the layer's path, and an
encoder-decoder's source-only outputs. The model's decode graph (decode_graph.py: a copy of its
fx graph with one more input, `cache`) reads from it what each module needs and hands it over as
an argument: a cached attention layer its KVCache (`cache=`), a cross attention layer its
KeptMemory (`cache=`), an embedding the positions (`positions=`), a relative bias the whole
cache (`cache=`, for the state's slots). Outside generate() nothing is handed and every forward
is the ordinary one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..modules.attention.cross import ProjectedMemory
from ..modules.attention.scores.base import ScoreIndex
from ..modules.attention.kernel import additive, later_or_outside


class DecodeState:
    """What the layers of one generate() call share (see the module docstring)."""

    def __init__(self, attention_mask: torch.Tensor, capacity: int):
        batch, prompt = attention_mask.shape
        self.capacity = capacity
        self.seen = torch.zeros(batch, capacity, dtype=torch.long, device=attention_mask.device)  # [B, capacity]
        self.seen[:, :prompt] = attention_mask
        self.start, self.count = 0, prompt  # the current call's tokens: slots start .. start + count - 1
        self._masks: dict = {}

    @property
    def end(self) -> int:
        return self.start + self.count

    def advance(self) -> None:
        """The next call brings one token per sequence, in the slot after the last."""
        self.start, self.count = self.end, 1
        self.seen[:, self.start] = 1
        self._masks = {}

    def restart(self) -> None:
        """The next call brings every token so far again, slots 0 .. end - 1 (a refill of the
        whole cache: Phi-3's LongRoPE switch, Decoder.refills)."""
        self.start, self.count = 0, self.end
        self._masks = {}

    def current_seen(self) -> torch.Tensor:
        """Which of the current tokens are real [B, count] (0: left padding)."""
        return self.seen[:, self.start:self.end]

    def positions(self) -> torch.Tensor:
        """The current tokens' positions [B, count]: Hugging Face's attention_mask.cumsum(-1) - 1, 0 on padding."""
        seen = self.seen[:, : self.end]
        positions = (seen.cumsum(-1) - 1).masked_fill(seen == 0, 0)  # [B, end]
        return positions[:, self.start:]

    def key_positions(self) -> torch.Tensor:
        """The positions of the cached keys [B, end] (0 on padding, which the mask hides)."""
        seen = self.seen[:, : self.end]
        return (seen.cumsum(-1) - 1).clamp(min=0)  # [B, end]

    def mask(self, window: int | None, dtype) -> torch.Tensor:
        """The additive mask [B, 1, count, end] of the current queries over the cached keys: a
        later key, a padded key, or (with a window) a key `window` or more slots back is hidden."""
        key = (window, dtype)
        if key not in self._masks:
            device = self.seen.device
            query = torch.arange(self.start, self.end, device=device)[:, None]  # [count, 1]
            slot = torch.arange(self.end, device=device)[None, :]  # [1, end]
            hidden = later_or_outside(query, slot, window)  # [count, end]
            padded = (self.seen[:, : self.end] == 0)[:, None, None, :]  # [B, 1, 1, end]
            self._masks[key] = additive(padded | hidden, dtype)  # [B, 1, count, end]
        return self._masks[key]

    def ring_slots(self, window: int) -> torch.Tensor:
        """The sequence slot each slot of a ring of `window` holds at this step [window]: ring slot s
        holds start - ((start - s) mod window) (negative: none yet)."""
        ring = torch.arange(window, device=self.seen.device)
        return self.start - (self.start - ring) % window

    def ring_mask(self, window: int, dtype) -> torch.Tensor:
        """The additive mask [B, 1, 1, window] of one query (slot start) over a ring buffer of
        `window` slots: ring slot s holds sequence slot start - ((start - s) mod window), hidden
        when that is before slot 0 or padded (all held slots are inside the window)."""
        key = ("ring", window, dtype)
        if key not in self._masks:
            held = self.ring_slots(window)  # [window]
            padded = (self.seen[:, held.clamp(min=0)] == 0) | (held < 0)[None, :]  # [B, window]
            self._masks[key] = additive(padded[:, None, None, :], dtype)
        return self._masks[key]


class KVCache:
    """One attention layer's keys and values, preallocated: every slot of the state's capacity,
    or for a sliding window shorter than that, a ring buffer of the last `window` slots only."""

    def __init__(self, state: DecodeState, window: int | None = None):
        self.state, self.window = state, window
        self.ring = window is not None and window < state.capacity
        self.keys = self.values = None  # [B, h_kv, capacity or window, d], allocated at the first write

    def allocate(self, k: torch.Tensor, v: torch.Tensor) -> None:
        slots = self.window if self.ring else self.state.capacity
        self.keys = k.new_zeros(*k.shape[:2], slots, k.shape[3])  # [B, h_kv, slots, d]
        self.values = v.new_zeros(*v.shape[:2], slots, v.shape[3])  # a latent layer's: its rotary key's width

    def store(self, k: torch.Tensor, v: torch.Tensor):
        """Write the current tokens' keys and values ([B, h_kv, count, d]); (keys, values, mask)
        to attend over: all tokens so far, or the window's."""
        state = self.state
        if self.keys is None:
            self.allocate(k, v)
        if self.ring:
            return self.store_in_ring(k, v)
        self.keys[:, :, state.start:state.end] = k
        self.values[:, :, state.start:state.end] = v
        mask = state.mask(self.window, k.dtype)
        return self.keys[:, :, : state.end], self.values[:, :, : state.end], mask  # [B, h_kv, end, d]

    def store_in_ring(self, k, v):
        """Slot a of the sequence lives at a % window. The prompt attends over its own keys (it
        is the first call), then keeps its last `window`; a decode step attends over the ring."""
        state, window = self.state, self.window
        kept = torch.arange(state.start, state.end, device=k.device)[-window:]
        self.keys[:, :, kept % window] = k[:, :, -window:]
        self.values[:, :, kept % window] = v[:, :, -window:]
        if state.count > 1:  # the prompt, from slot 0
            return k, v, state.mask(window, k.dtype)
        return self.keys, self.values, state.ring_mask(window, k.dtype)

    def attend(self, module, x: torch.Tensor, bias: torch.Tensor | None = None, tensors=()) -> torch.Tensor:
        """module's attention for the current tokens x [B, count, C] (external projections: the
        node's q, k and v) over every token so far;
        `bias`: a score bias input ([1, h, count, end]: T5's relative_bias at the cached slots)."""
        q, k, v = module.project(x)  # [B, h, N, d], 2 x [B, h_kv, N, d]; x: (q, k, v) where external
        B, N = q.shape[0], q.shape[2]
        q, k = module.normed(q, k, after_rotary=False)
        if module.rotary is not None:
            q, k = rotate_at(module.rotary, q, k, self.state.positions())
        q, k = module.rotate_parts(q, k)  # parts that turn q and k (none that decodes yet)
        q, k = module.normed(q, k, after_rotary=True)
        k, v, mask = self.store(k, v)
        rule = module.kernel.keys  # the kind's mask rule
        if rule.adds_bias:  # ALiBi: distances between the positions (no window, so no ring)
            positions, key_positions = self.state.positions(), self.state.key_positions()  # [B, N], [B, M]
            mask = mask + rule.bias(positions[:, None, :, None], key_positions[:, None, None, :], q.dtype,
                                    module.kernel.table)  # [B, h, N, M]
        calls = module.value_calls(v)  # one kernel call per values, as the forward (differential: two)
        if module.mixes_scores():  # score parts (their SCORE_DECODE said they decode): the forward's steps
            k = module.share_kv(k)  # [B, h, end (or window), d]
            bias = module.position_bias(q, k, bias)
            index = ScoreIndex.of_positions(q, self.state.positions(), self.key_positions(k.shape[2]), tensors)
            outs = tuple(module.kernel.scored(q, k, module.share_kv(values), bias, mask, index, module.parts())
                         for values in calls)  # each [B, h, N, d]
        else:
            bias = module.position_bias(q, k, bias)
            if bias is not None:
                mask = mask + bias.to(q.dtype)  # [B, h, count, end]
            outs = tuple(self.attention(module, q, k, values, mask) for values in calls)  # each [B, h, N, d]
        out = module.combine_heads(outs)  # as the forward does after the kernel
        out = module.proj(out.transpose(1, 2).reshape(B, N, -1))  # -> [B, N, h*d]
        return module.proj_drop(out) if module.proj_drop is not None else out

    def attend_latent(self, module, x: torch.Tensor) -> torch.Tensor:
        """A latent attention layer's (attention/latent.py) for the current tokens x [B, count, C]:
        the cache holds its latent as the keys [B, 1, slots, kv_rank] and its rotated rotary key as
        the values [B, 1, slots, rope]; both are expanded to every head's keys and values over
        every token so far."""
        q_nope, q_rope = module.queries(x)  # [B, h, N, nope], [B, h, N, rope]
        c, k_rope = module.latent(x)  # [B, 1, N, r], [B, 1, N, rope]
        q_rope, k_rope = rotate_at(module.rotary, q_rope, k_rope, self.state.positions())
        c, k_rope, mask = self.store(c, k_rope)  # [B, 1, end, r], [B, 1, end, rope], [B, 1, N, end]
        k, v = module.expand(c, k_rope)  # [B, h, end, nope+rope], [B, h, end, v]
        q = torch.cat((q_nope, q_rope), dim=-1)  # [B, h, N, nope+rope]
        return module.merge(module.sdpa(q, k, v, mask))  # [B, h, N, v] -> [B, N, C]

    def key_positions(self, slots: int) -> torch.Tensor:
        """The positions [B, slots] of the keys `store` gave: every slot so far, or a ring's."""
        positions = self.state.key_positions()  # [B, every slot so far]
        if not self.ring or positions.shape[1] == slots:
            return positions
        return positions.index_select(1, self.state.ring_slots(self.window).clamp(min=0))  # [B, window]

    @staticmethod
    def attention(module, q, k, v, mask) -> torch.Tensor:
        """SDPA of the queries [B, h, N, d] over the cached keys and values [B, h_kv, end, d]
        (repeated for the query heads that share them) -> [B, h, N, d]."""
        k, v = module.share_kv(k), module.share_kv(v)  # [B, h, end (or window), d]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=module.scale)  # [B, h, N, d]


class RecentTokens:
    """One causal conv layer's inputs of the last `count` tokens [B, count, C] (Hugging Face's
    conv state), zeros before the first call: each call convolves its tokens after them and
    keeps the last `count` again. A padded token's input is taken as zeros, as Hugging Face's
    LFM2 and Mamba zero the padded tokens' states before their short conv (one bias-free
    projection before the conv gives the same zeros)."""

    def __init__(self, state, count: int, held: torch.Tensor | None = None):
        self.state, self.count, self.held = state, count, held  # held: [B, count, C], made at the first call

    def convolve(self, conv, x: torch.Tensor) -> torch.Tensor:
        """conv (the module's plain forward, causal) of the current tokens x [B, N, C] after the
        held ones -> [B, N, out]."""
        x = x * self.state.current_seen()[:, :, None].to(x.dtype)  # [B, N, C]: padded tokens read as zeros
        if self.held is None:
            self.held = x.new_zeros(x.shape[0], self.count, x.shape[2])  # [B, count, C]
        joined = torch.cat([self.held, x], dim=1)  # [B, count + N, C]
        self.keep(joined[:, -self.count:])  # [B, count, C]
        return conv(joined)[:, -x.shape[1]:]  # [B, count + N, out] -> [B, N, out]

    def keep(self, recent: torch.Tensor) -> None:
        self.held = recent


class KeptMemory:
    """One cross attention layer's keys and values of the memory (the encoder's output, the same
    at every step), projected at the first call and kept; an exported step is given them."""

    def __init__(self, projected: ProjectedMemory | None = None):
        self.projected = projected

    def project(self, module, memory: torch.Tensor) -> ProjectedMemory:
        """module's keys and values of memory [B, M, C] -> [B, h_kv, M, d] each, the kept ones after the first call."""
        if self.projected is None:
            self.projected = ProjectedMemory(*module.memory_keys_values(memory))
        return self.projected


class DecodeCache:
    """What one generate() call (or one exported step) keeps (see the module docstring):
    `state` (a DecodeState, or an exported step's own: step.py, seq2seq_step.py, compiled.py),
    each cached attention layer's KVCache and each cross attention layer's KeptMemory by the
    layer's path, and the outputs of an encoder-decoder's source-only nodes by node name, each
    computed at the first call. The decode graph reads each module's entry by its path and hands
    it to the module (`attn_cache = cache.layer('layers.0.attn'); attn = self.attn(x, cache = attn_cache)`)."""

    def __init__(self, state, layers: dict[str, KVCache], memories: dict[str, KeptMemory] | None = None,
                 sources: dict[str, torch.Tensor] | None = None, recent: dict[str, RecentTokens] | None = None):
        self.state, self.layers = state, layers
        self.memories = {} if memories is None else memories
        self.sources = {} if sources is None else sources
        self.recent = {} if recent is None else recent

    def layer(self, path: str) -> KVCache:
        """The keys and values of the cached attention layer at `path`."""
        return self.layers[path]

    def recent_inputs(self, path: str) -> RecentTokens:
        """The last inputs of the causal conv layer at `path`."""
        return self.recent[path]

    def memory(self, path: str) -> KeptMemory:
        """The projected memory of the cross attention layer at `path` (empty until its first call)."""
        return self.memories.setdefault(path, KeptMemory())

    def restart(self) -> None:
        """The next call brings every token so far again (a refill of the whole cache: Phi-3's
        LongRoPE switch, Decoder.refills): the state from slot 0, the causal convs' recent
        inputs emptied (the keys and values are overwritten where they lie)."""
        self.state.restart()
        for recent in self.recent.values():
            recent.held = None

    def positions(self) -> torch.Tensor:
        """The current tokens' positions [B, count] (the embeddings')."""
        return self.state.positions()

    def source(self, name: str, module, *args, **kwargs):
        """The output of the source-only node `name` (module(*args)), computed at the first call:
        its inputs, the source, do not change while decoding."""
        if name not in self.sources:
            self.sources[name] = module(*args, **kwargs)
        return self.sources[name]

    def tensors(self) -> list[torch.Tensor]:
        """Every cached layer's keys and values, layer by layer, then every causal conv's recent
        inputs (the compiled step's inputs, the exported step's outputs)."""
        kept = [t for kv in self.layers.values() for t in (kv.keys, kv.values)]
        return kept + [r.held for r in self.recent.values()]


def rotate_at(rotary, q, k, positions):
    """Rotary embeddings at the given positions [B, N] (Rotary in sequence.py turns 0..N-1):
    the angles in float32, as Hugging Face's Llama computes them."""
    freqs = positions[:, :, None].float() * rotary.frequencies(positions)[None, None, :]  # [B, N, dims/2]
    angles = rotary.spread(freqs)[:, None]  # [B, N, dims] -> [B, 1, N, dims]
    cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
    return rotary.rotate(q, cos, sin), rotary.rotate(k, cos, sin)


class SequenceSoFar:
    """The cache of a generate() call on a spec that decodes without one (Decoder.without_cache):
    `state` as a DecodeCache's, and the token ids so far [B, end], which each step runs whole."""

    def __init__(self, state: DecodeState):
        self.state, self.ids = state, None

    def extended(self, ids: torch.Tensor) -> torch.Tensor:
        """The ids so far with this call's `ids` [B, count] after them: [B, end]. A refill (the
        whole sequence brought again) replaces them."""
        if self.ids is None or ids.shape[1] == self.state.end:
            self.ids = ids
        else:
            self.ids = torch.cat([self.ids, ids], dim=1)  # [B, end - count] -> [B, end]
        return self.ids

    def tensors(self) -> list[torch.Tensor]:
        return []
