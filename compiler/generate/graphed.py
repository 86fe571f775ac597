"""The decode step under CUDA graphs: `generate(..., compile=True)` on a CUDA GPU.

At batch 1 a decode step on a GPU is a few hundred small kernels, and launched one by one
(from Python, or from an AOTInductor program's C++) their launches take most of the step's
time. Here the step (compiled.py's StaticStep, the module the CPU's program is made of) goes
through torch.compile with mode="reduce-overhead": inductor's kernels, recorded as one CUDA
graph per batch size and cache capacity at the first calls (torch's CUDA graph trees) and
replayed for every later token, with no launch but the replay's.

A graph reads its inputs at the addresses it was recorded with. The caches are therefore
static buffers held here, one set per shape and dtype, marked as such for torch; each
generate() copies the caches its prefill filled into them once, at its first step, and its
steps write there. The token ids, the slot and the seen mask (a few bytes) torch copies into
the graph's own inputs before each replay; the slot is a tensor held on the GPU too, filled in
place each step (a tensor made from a Python number would wait for the GPU at every token). A
replay overwrites the last one's outputs, so they are returned as copies (the loop keeps a
step's scores past the next step).

The weights are read where they lie, not frozen: a change in place is seen at the next token,
and a module's train or eval mode, a dtype or a new tensor makes torch compile or record again.
Nothing is kept on disk (a CUDA graph lives in its process; inductor's own cache keeps the
kernels). AOTInductor's CUDA packages are not used here: torch 2.11's loader crashed on the
H200 we measured (tests/benchmarks/aoti_cuda_probe.py).
"""

from __future__ import annotations

import torch

from .cache import DecodeState
from .compiled import StaticStep

# Compiles of the step one process may make (every model's step is StaticStep.forward, so every
# model, batch size, cache capacity and dtype counts towards dynamo's limits: 8 of one function,
# 256 in all by default; past them a fullgraph compile raises). Raised while a new shape compiles.
RECOMPILES = 256
ALL_RECOMPILES = 1024


class GraphedSteps:
    """The decode step of one model compiled with CUDA graphs, one graph per batch size and
    cache capacity (held in this process): the interface of compiled.py's CompiledSteps."""

    kept = None  # nothing on disk

    def __init__(self, decoder):
        self.model = decoder.model
        self.step = StaticStep(decoder)
        self.compiled = torch.compile(self.step, mode="reduce-overhead", fullgraph=True, dynamic=False)
        self.buffers: dict[tuple, list[torch.Tensor]] = {}  # the static caches, by their shapes and dtypes
        self.slots: dict[torch.device, torch.Tensor] = {}  # the current slot [1], one per device
        self.compiled_for: set[tuple] = set()  # (batch, capacity, dtype) compiled in this process

    def __deepcopy__(self, memo):
        return None  # a copied model compiles its own (these read this model's weights)

    def refresh(self) -> None:
        """Nothing to forget: the weights are read where they lie, and torch compiles or records
        again when the model's mode, dtypes or tensors change."""

    @property
    def how(self) -> dict[tuple[int, int], str]:
        """"made" for each (batch, capacity) compiled in this process (CompiledSteps.how's form)."""
        return {(batch, slots): "made" for batch, slots, _ in self.compiled_for}

    def ready(self, batch: int, slots: int) -> bool:
        """A graph for this batch and cache capacity was recorded in this process."""
        return (batch, slots) in self.how

    @staticmethod
    def where_kept() -> str:
        return "recorded as CUDA graphs in this process, not kept on disk"

    def bind(self, caches: list[torch.Tensor]):
        """The step of one generate() call over the caches its prefill filled: they are copied
        into this shape's static buffers, which its steps then read and write. (ids [B, 1],
        state) -> (logits [B, vocab], their argmax [B])."""
        held = self.static_caches(caches)
        for buffer, filled in zip(held, caches):
            buffer.copy_(filled)
        return lambda ids, state: self.run(ids, state, held)

    def static_caches(self, caches: list[torch.Tensor]) -> list[torch.Tensor]:
        """The held buffers shaped as `caches` (made and marked static at the first call)."""
        key = tuple((tuple(c.shape), c.dtype, c.device) for c in caches)
        if key not in self.buffers:
            held = [torch.empty_like(c) for c in caches]
            for buffer in held:
                torch._dynamo.mark_static_address(buffer)
            self.buffers[key] = held
        return self.buffers[key]

    def run(self, ids: torch.Tensor, state: DecodeState, held: list[torch.Tensor]):
        ids = ids.contiguous()  # a view's strides would only make dynamo compile again
        slot = self.slots.get(ids.device)
        if slot is None:
            slot = self.slots[ids.device] = torch.zeros(1, dtype=torch.long, device=ids.device)  # [1]
        slot.fill_(state.start)  # in place, no wait for the GPU
        shape = (ids.shape[0], state.seen.shape[1], held[0].dtype if held else None)
        if shape in self.compiled_for:
            logits, best, *_ = self.compiled(ids, slot, state.seen, *held)  # [B, vocab], [B]: a replay
        else:
            logits, best, *_ = self.first_call(ids, slot, state.seen, held)
            self.compiled_for.add(shape)
        return logits.clone(), best.clone()  # the next replay overwrites the graph's own outputs

    def first_call(self, ids, slot, seen, held):
        """The step's first call at a shape, which compiles it, with room for every compile."""
        from torch._dynamo import config as dynamo_config

        limits = {name: max(least, getattr(dynamo_config, name)) for name, least in
                  (("recompile_limit", RECOMPILES), ("accumulated_recompile_limit", ALL_RECOMPILES))
                  if hasattr(dynamo_config, name)}  # names of torch 2.7 and later
        with dynamo_config.patch(**limits):
            return self.compiled(ids, slot, seen, *held)
