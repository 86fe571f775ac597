"""The decode step compiled: `generate(..., compile=True)`.

An eager decode step runs the model's Python, module by module, for every token: at batch 1
that overhead is most of the step once the weights stream fast (bf16). Here the single-token
step is one AOTInductor program, made once per model, batch and cache capacity (CompiledSteps),
kept on disk for later processes (kept_steps.py), and called for every token after the prefill.

For that the step must keep one shape from token to token, so it reads and writes the caches
the prefill filled (cache.py's KVCache: keys and values [B, h_kv, capacity or window, d]) in
place, at a slot given as a tensor, and attends over every slot of them, the ones not yet
written (or padded, or outside a sliding window) hidden by the mask. The positions are
computed inside from the same tensors (SlotState), and KVCache.attend does the rest, one
query's attention written as products and sums (one_query_attention). The step calls the
model's decode graph (decode_graph.py) with a DecodeCache of SlotCaches (those caches), as the eager
steps call it with their KVCaches. Only the prefill (a different length per prompt) stays
eager. `StaticStep` is the module exported; the program is compiled frozen, its linears on
weights packed once (oneDNN's, or inductor's own C++ GEMM kernels, the faster at each shape),
where packing is the faster way on this machine (CompiledSteps.make), and it takes greedy
decoding's argmax itself. The tokens are the eager loop's in fp32 up to float rounding (packed
products may sum in another order than F.linear); in bf16 a long output may part from the
eager one.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.nn as nn

from ..modules.attention.kernel import additive, later_or_outside
from ..inductor.frozen import TUNED_LINEARS, FrozenProgram, compile_frozen, compile_unpacked, load_frozen
from ..inductor.matvec import packing_pays, weight_matrices
from .cache import DecodeCache, DecodeState, KVCache, RecentTokens
from .kept_steps import KeptSteps, cache_root


class SlotState:
    """What the layers of one compiled step share: which slots hold a token (`seen`
    [B, capacity], the current one included) and the current slot ([1] long)."""

    def __init__(self, seen: torch.Tensor, slot: torch.Tensor):
        self.seen, self.slot = seen, slot
        self.slots = torch.arange(seen.shape[1], device=seen.device)  # [capacity]
        self.queries: list[torch.Tensor] = []  # each layer's query [B, h, 1, d], returned by the step (StaticStep)

    def current_seen(self) -> torch.Tensor:
        """Whether the current token is real [B, 1] (it is: decode steps bring no padding)."""
        return self.seen.index_select(1, self.slot)  # [B, 1]

    def positions(self) -> torch.Tensor:
        """The current token's position [B, 1]: the tokens seen up to its slot, less one (Hugging Face's)."""
        before = self.seen * (self.slots <= self.slot)  # [B, capacity]
        return before.sum(dim=-1, keepdim=True) - 1  # [B, 1]

    def key_positions(self) -> torch.Tensor:
        """The position of every slot's key [B, capacity] (those not yet written are hidden by the mask)."""
        return (self.seen.cumsum(-1) - 1).clamp(min=0)  # [B, capacity]

    def mask(self, window: int | None, dtype) -> torch.Tensor:
        """[B, 1, 1, capacity]: a slot after the current one, padded, or `window` or more back is hidden."""
        hidden = later_or_outside(self.slot, self.slots, window)[None, :] | (self.seen == 0)  # [B, capacity]
        return additive(hidden[:, None, None, :], dtype)

    def ring_slots(self, window: int) -> torch.Tensor:
        """The sequence slot each slot of a ring of `window` holds [window] (cache.py's DecodeState.ring_slots)."""
        ring = torch.arange(window, device=self.seen.device)
        return self.slot - (self.slot - ring) % window

    def ring_mask(self, window: int, dtype) -> torch.Tensor:
        """[B, 1, 1, window] over a ring of `window` slots (cache.py's DecodeState.ring_mask)."""
        held = self.ring_slots(window)  # [window]
        padded = (self.seen.index_select(1, held.clamp(min=0)) == 0) | (held < 0)[None, :]  # [B, window]
        return additive(padded[:, None, None, :], dtype)


class SlotCache(KVCache):
    """One layer's filled cache, written at the state's slot in place (a ring at slot % window)."""

    def __init__(self, state: SlotState, keys: torch.Tensor, values: torch.Tensor, window: int | None, ring: bool):
        self.state, self.keys, self.values, self.window, self.ring = state, keys, values, window, ring

    def store(self, k, v):
        state = self.state
        if self.ring:
            at = state.slot % self.window  # [1]
            mask = state.ring_mask(self.window, k.dtype)
        else:
            at, mask = state.slot, state.mask(self.window, k.dtype)
        self.keys.index_copy_(2, at, k)  # [B, h_kv, slots, d], one slot written
        self.values.index_copy_(2, at, v)
        return self.keys, self.values, mask

    def attention(self, module, q, k, v, mask) -> torch.Tensor:
        self.state.queries.append(q)  # an output of the step, so computed once (see StaticStep)
        return one_query_attention(q, k, v, mask, module.scale)


class SlotRecent(RecentTokens):
    """One causal conv's recent inputs [B, count, C], the prefill's, written again in place."""

    def keep(self, recent: torch.Tensor) -> None:
        self.held.copy_(recent)


def one_query_attention(q, k, v, mask, scale: float | None) -> torch.Tensor:
    """SDPA of one query per sequence q [B, h, 1, d] over every slot of the cache k, v
    [B, h_kv, S, d], mask [B, 1 or h, 1, S] -> [B, h, 1, d], written as products and sums.

    In the compiled step inductor makes each of them one loop over the cache, in float32 as
    SDPA's CPU kernel accumulates, where SDPA's flash kernel (made for many queries) cost more
    than the rest of a layer's non-matmul work; the query heads that share a key head read it
    where it lies instead of from a repeated copy."""
    B, h, _, d = q.shape
    h_kv, slots = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    grouped = q.reshape(B, h_kv, h // h_kv, 1, d).float()  # [B, h_kv, group, 1, d]: the heads of one key head
    scores = (grouped * k[:, :, None].float()).sum(-1) * scale  # [B, h_kv, group, S]
    scores = scores + mask.reshape(mask.shape[0], h_kv if mask.shape[1] > 1 else 1, -1, slots)  # [B, h_kv, group, S]
    weights = scores.softmax(-1)  # [B, h_kv, group, S]
    out = (weights[..., None] * v[:, :, None].float()).sum(-2)  # [B, h_kv, group, dv]
    return out.to(q.dtype).reshape(B, h, 1, v.shape[-1])  # [B, h, 1, dv]


class StaticStep(nn.Module):
    """One decode step of a decoder-only model over its filled caches:
    forward(ids [B, 1], slot [1], seen [B, capacity], keys and values of each layer, then the
    recent inputs of each causal conv [B, count, C]) -> (logits
    [B, vocab], their argmax [B]: greedy decoding's choice, taken in the program, then each
    cached layer's query [B, h, 1, d], which the callers drop).
    `model` is the model's decode graph (its modules at the model's paths).

    The queries are outputs only so that the compiler computes each once: inductor inlined the
    rotated query into the loop of the scores, and computed its rotation (a cos and a sin per
    element) again for every slot of the cache, which took 43 of a layer's 44 us of attention
    (llama bf16, 128 slots, Intel Xeon, 2 threads); as outputs they are written once (14 us), and
    the step took 1.47-1.50 ms a token instead of 1.59-1.62 (fp32: 2.25-2.28 against 2.52-2.56)."""

    def __init__(self, decoder):
        super().__init__()
        self.model = decoder.decoding
        self.paths, self.output = decoder.paths, decoder.output  # each cached layer's path
        self.windows = decoder.windows  # each layer's sliding window (its DECODE fact), or None
        self.recent_paths, self.recent_counts = decoder.recent_paths, decoder.recent_counts  # the causal convs

    def forward(self, ids, slot, seen, *caches):
        state = SlotState(seen, slot)
        held = caches[2 * len(self.paths):]  # each causal conv's recent inputs, after the keys and values
        recent = {path: SlotRecent(state, count, inputs)
                  for path, count, inputs in zip(self.recent_paths, self.recent_counts, held)}
        out = self.model(ids, DecodeCache(state, self.slot_caches(state, caches), recent=recent))
        out = out[self.output] if isinstance(out, (tuple, list)) else out
        logits = out[:, -1, :].float()  # [B, 1, vocab] -> [B, vocab]
        return logits, first_best(logits), *state.queries  # [B, vocab], [B], each [B, h, 1, d]

    def slot_caches(self, state: SlotState, caches) -> dict:
        """Each cached layer's SlotCache over its keys and values (caches[2i], caches[2i + 1])."""
        layers = {}
        for i, (path, window) in enumerate(zip(self.paths, self.windows)):
            keys, values = caches[2 * i], caches[2 * i + 1]  # [B, h_kv, capacity or window, d]
            ring = window is not None and keys.shape[2] == window < state.seen.shape[1]
            layers[path] = SlotCache(state, keys, values, window, ring)
        return layers


def first_best(logits: torch.Tensor) -> torch.Tensor:
    """logits.argmax(-1) [B] of logits [B, vocab] (the first of equal best, the first NaN where
    there is one), as two vectorised passes: inductor's argmax loop took 50 us over 32,000 logits."""
    vocab = logits.shape[-1]
    best = logits.amax(dim=-1, keepdim=True)  # [B, 1]: NaN where a logit is NaN
    index = torch.arange(vocab, device=logits.device)  # [vocab]
    return torch.where((logits == best) | (logits != logits), index, vocab).amin(dim=-1)  # [B]: x != x where NaN


class CompiledSteps:
    """The decode step of one model as AOTInductor programs, one per batch size and cache
    capacity, each made at the first compiled generate() that needs it (or loaded from the
    ones kept on disk, kept_steps.py) and held while the model's weights and mode stay as they
    were (`refresh`, at each generate()).

    Each program is StaticStep exported and compiled, the weights its constants; frozen
    (inductor's freezing, grad off), each linear's weight packed once for one row, where that
    streams them faster than F.linear's matrix-vector products (about twice as fast in bf16; in
    fp32 on an AMD EPYC, not on an Intel Xeon without AMX: `make`). The frozen copy is why a
    change of the weights (or of train / eval mode) makes the programs again; it also holds the
    weights a second time while the model lives. Calling a program checks no guards
    (torch.compile's took 0.2 ms a step)."""

    def __init__(self, decoder):
        self.model = decoder.model  # whose weights and mode the programs froze (refresh)
        self.step = StaticStep(decoder)  # in the model's mode (its weights_key): nothing of the model is set
        self.folder = tempfile.TemporaryDirectory(prefix="archspec-decode-step-")
        root = cache_root()
        self.kept = KeptSteps(self.model, root) if root is not None else None
        self.programs: dict[tuple[int, int], FrozenProgram] = {}
        self.how: dict[tuple[int, int], str] = {}  # "made" or "loaded" (from the kept ones), by shape
        self.made_for = None
        self.made = 0  # programs made so far: each its own package file

    def __deepcopy__(self, memo):
        return None  # a copied model makes its own programs (these hold this model's weights)

    def refresh(self) -> None:
        """Forget the programs if the model's weights or mode, or torch's thread count (the
        kernels are compiled for it), changed since they were made."""
        now = (torch.get_num_threads(), weights_key(self.model))
        if now != self.made_for:
            self.programs, self.how, self.made_for = {}, {}, now

    def ready(self, batch: int, slots: int) -> bool:
        """A program for this batch and cache capacity is held, or kept on disk for these weights
        (as they were at the last refresh: Decoder.compiled_steps refreshes)."""
        return (batch, slots) in self.programs or self.kept_path(batch, slots) is not None

    def kept_path(self, batch: int, slots: int):
        if self.kept is None:
            return None
        return self.kept.find(batch, slots, self.made_for[0], self.made_for[1])

    def where_kept(self) -> str:
        return f"kept in {cache_root()}" if self.kept is not None else "not kept: ARCHSPEC_CACHE=off"

    def bind(self, caches: list[torch.Tensor]):
        """The step of one generate() call over the caches its prefill filled: (ids [B, 1],
        state) -> (logits [B, vocab], their argmax [B])."""
        return lambda ids, state: self.run(ids, state, caches)

    def run(self, ids: torch.Tensor, state: DecodeState,
            caches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, vocab], their argmax [B]) of one token per sequence (ids [B, 1]) at the
        state's current slot, the caches written in place."""
        # the program reads its inputs at the strides it was compiled for: a view (a column of the
        # sequence so far, [B, 1] with row stride L) would have it read other rows' memory
        inputs = (ids.contiguous(), torch.tensor([state.start], device=ids.device), state.seen, *caches)
        shape = (ids.shape[0], state.seen.shape[1])  # batch, capacity: every input's shape follows
        program = self.programs.get(shape)
        if program is None:
            program = self.programs[shape] = self.load(shape, inputs)
        logits, best, *_ = program(*inputs)
        return logits, best

    def load(self, shape: tuple[int, int], inputs: tuple) -> FrozenProgram:
        """The program kept for this shape, or one made now (and kept, unless ARCHSPEC_CACHE=off)."""
        path = self.kept_path(*shape)
        self.how[shape] = "loaded" if path is not None else "made"
        if path is None:
            path = self.make(inputs)
            if self.kept is not None:
                path = self.kept.keep(path, self.kept.path(*shape, self.made_for[0], self.made_for[1]))
        return load_frozen(str(path))

    def make(self, inputs: tuple) -> str:
        """StaticStep at these inputs' shapes, exported and compiled frozen by AOTInductor: its
        package file. Its linears' weights are packed where oneDNN multiplies packed weights by a
        vector faster than F.linear does on this machine, in their dtype (matvec.py: on an Intel
        Xeon without AMX fp32 runs faster unpacked, bf16 packed), each linear then oneDNN's or
        inductor's own C++ GEMM kernel, whichever the compile timed faster at its shape
        (frozen.TUNED_LINEARS: 3 s more a distinct shape); otherwise the weights are left as they
        are, compiled in a process of its own (frozen.compile_unpacked says why)."""
        path = os.path.join(self.folder.name, f"step{self.made}.pt2")
        self.made += 1
        with torch.no_grad():
            program = torch.export.export(self.step, inputs, strict=False)
            packed = packing_pays(weight_matrices(self.model))  # None: not a question here (a GPU)
        if packed is False:
            return compile_unpacked(program, path)
        return compile_frozen(program, path, TUNED_LINEARS if packed else None)


def weights_key(model: nn.Module) -> tuple:
    """What the frozen programs copied from the model: each parameter's and buffer's storage,
    version and dtype, and whether each module trains."""
    tensors = [*model.parameters(), *model.buffers()]
    modes = tuple(m.training for m in model.modules())
    return (modes, *((t.data_ptr(), t._version, t.dtype, t.device) for t in tensors))
