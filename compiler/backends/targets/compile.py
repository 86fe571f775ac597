"""compile: the module through torch.compile (inductor; on the CPU frozen, as for inference:
bench.compiled_settings); timed by `archspec bench`, not built."""

from __future__ import annotations

from . import register
from .base import ModuleTarget


class Compile(ModuleTarget):
    name = "compile"
    doc = "the module through torch.compile (inductor; frozen on the CPU)"
    commands = ("bench",)
    bench_precisions = ("fp32", "bf16", "fp16")
    compiled = True
    order = 20


register(Compile())
