"""cudagraphs: the module through torch.compile with CUDA graphs (mode="reduce-overhead"), on a
CUDA GPU: each batch size compiled, recorded and replayed, the warm-up and the recording done by
`archspec bench` before any timing (bench.torch_runner); timed by `archspec bench`, not built.
On the CPU torch records no graph: `--target compile` is the same there."""

from __future__ import annotations

from . import register
from .base import Availability
from .compile import Compile


class CudaGraphs(Compile):
    """The compile target's bench (bench.torch_runner) in torch.compile's reduce-overhead mode, on a GPU only."""

    name = "cudagraphs"
    doc = "the module through torch.compile with CUDA graphs (mode reduce-overhead; a CUDA GPU)"
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
        from ..bench import Unavailable

        if not device.startswith("cuda"):
            raise Unavailable("CUDA graphs run on a CUDA GPU (--device cuda); on the CPU use --target compile")
        return super().bench(model, graph, precision, workdir=workdir, threads=threads, device=device)


register(CudaGraphs())
