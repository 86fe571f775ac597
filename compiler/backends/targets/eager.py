"""eager: the GraphModule itself; its build writes only what every build writes (report.json,
report.html, model.py, model.safetensors), in fp32 or bf16."""

from __future__ import annotations

from . import register
from .base import ModuleTarget


class Eager(ModuleTarget):
    name = "eager"
    doc = "the torch.fx GraphModule itself, run by PyTorch"
    artifacts = "model.py and report only"
    commands = ("build", "bench")
    build_precisions = ("fp32", "bf16")
    bench_precisions = ("fp32", "bf16", "fp16")
    precision_docs = {"bf16": "the eager module in bf16"}
    default_for = ("bench",)
    runs_model = False
    is_reference = True
    order = 10

    def build(self, context):
        return None  # the module, model.py and model.safetensors are every build's own


register(Eager())
