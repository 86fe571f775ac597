"""cudagraphs: the module through torch.compile with CUDA graphs (mode="reduce-overhead"), on a
CUDA GPU: each batch size compiled, recorded and replayed, the warm-up and the recording done by
`archspec bench` before any timing (bench.torch_runner); timed by `archspec bench`, not built.
On the CPU torch records no graph: `--target compile` is the same there."""

from __future__ import annotations

from . import register
from .base import Availability, ModuleTarget


class CudaGraphs(ModuleTarget):
    name = "cudagraphs"
    doc = "the module through torch.compile with CUDA graphs (mode reduce-overhead; a CUDA GPU)"
    commands = ("bench",)
    bench_precisions = ("fp32", "bf16", "fp16")
    compiled = True
    compile_mode = "reduce-overhead"
    order = 22

    def availability(self) -> Availability:
        """Usable where torch sees a CUDA GPU."""
        import torch

        base = super().availability()
        if base.usable and not torch.cuda.is_available():
            return Availability(False, "no CUDA GPU on this machine: CUDA graphs run on a GPU (on the CPU "
                                       "--target compile)", base.version)
        return base

    def bench(self, model, graph, precision: str, *, workdir: str, threads: int, device: str):
        from ..bench import Unavailable, torch_runner

        if not device.startswith("cuda"):
            raise Unavailable("CUDA graphs run on a CUDA GPU (--device cuda); on the CPU use --target compile")
        return torch_runner(model, graph, precision, compiled=True, device=device, mode=self.compile_mode)


register(CudaGraphs())
