"""tensorrt: a TensorRT engine built by torch-tensorrt from the torch.export program (fp32 or
fp16, static batch or a range), saved so that it loads without archspec; `archspec check
--target tensorrt` reports which ops convert. Building runs without a GPU (torch-tensorrt-rtx);
running the engine (bench) needs a CUDA GPU."""

from __future__ import annotations

import importlib.util

from . import register
from .base import Availability, Target

INSTALL = "pip install 'archspec-compiler[tensorrt-rtx]'"
DISTRIBUTIONS = ("torch-tensorrt-rtx", "torch-tensorrt")  # the extras tensorrt-rtx and tensorrt
NO_GPU = ("no CUDA GPU on this machine: torch-tensorrt-rtx builds engines here (archspec build --target "
          "tensorrt) but only a GPU runs them")


def installed_version() -> str | None:
    """"torch-tensorrt-rtx 2.14.0" or "torch-tensorrt 2.x", whichever is installed."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in DISTRIBUTIONS:
        try:
            return f"{distribution} {version(distribution)}"
        except PackageNotFoundError:
            continue
    return None


class TensorRT(Target):
    name = "tensorrt"
    doc = "a TensorRT engine (model.engine) built by torch-tensorrt; runs on a CUDA GPU"
    artifacts = "+ a TensorRT engine"
    commands = ("build", "bench", "check")
    build_precisions = ("fp32", "fp16")
    bench_precisions = ("fp32", "fp16")
    precision_docs = {"fp16": "a TensorRT engine"}
    needs = ("export",)
    order = 50

    def availability(self) -> Availability:
        """Usable when torch sees a CUDA GPU and torch-tensorrt imports (not tried without a GPU:
        the import takes seconds, and the answer is no either way)."""
        if importlib.util.find_spec("torch_tensorrt") is None:
            return Availability(False, f"torch-tensorrt is not installed ({INSTALL})")
        version = installed_version()
        import torch

        if not torch.cuda.is_available():
            return Availability(False, NO_GPU, version)
        from archspec.core.errors import SpecError

        from ..tensorrt import load_torch_tensorrt

        try:
            load_torch_tensorrt()
        except SpecError as exc:
            return Availability(False, str(exc).splitlines()[0], version)
        return Availability(True, version=version)

    def precision_problem(self, precision: str, device: str) -> str | None:
        return None if precision == "fp16" else f"TensorRT builds fp32 or fp16 engines, not {precision}"

    def apply_precision(self, model, graph, request):
        from ..precision import PrecisionResult

        result = PrecisionResult(request.precision, request.target)
        result.notes.append("TensorRT builds the fp16 engine from the fp32 model (build_engine)")
        return result

    def preflight(self) -> None:
        """torch-tensorrt must import: say what to install before any work."""
        from ..tensorrt import load_torch_tensorrt

        load_torch_tensorrt()

    def steps(self, precision: str) -> int:
        from ..tensorrt import STEPS

        return STEPS

    def build(self, context):
        """model.engine, tensorrt.json (and model.trt.pt2 on a CUDA machine), reusing the export's
        program when its batch range is the engine's."""
        from ..export import export_range
        from ..tensorrt import build_engine

        batch = context.batch
        program = context.made.get("export")
        reuse = program if export_range(batch) == (batch.min, batch.max) else None
        result = build_engine(context.model, context.graph, context.outdir, context.precision, batch, program=reuse,
                              progress=context.progress)
        context.written.extend(result.files)
        context.notes.extend(result.notes)

    def check(self, graph, batch=None):
        """Which nodes have a TensorRT converter (runs without a GPU)."""
        from ..tensorrt import coverage_report

        return coverage_report(graph, batch=batch)

    def bench(self, model, graph, precision: str, *, workdir: str, threads: int, device: str):
        """One engine per batch size, compiled on the GPU when first bound."""
        import torch
        from torch.export.passes import move_to_device_pass

        from ..bench import Prepared, bench_inputs
        from ..precision import DTYPES
        from ..tensorrt import _settings_kwargs, export_for_tensorrt, load_torch_tensorrt

        tt = load_torch_tensorrt()
        dtype = DTYPES[precision]
        engines: dict = {}

        def engine(batch: int):
            if batch not in engines:
                program = move_to_device_pass(export_for_tensorrt(model, graph, precision, str(batch)), "cuda")
                args = bench_inputs(graph, batch, dtype, "cuda")
                engines[batch] = tt.dynamo.compile(program, arg_inputs=list(args), **_settings_kwargs(tt, precision))
            return engines[batch]

        def bind(batch: int):
            compiled, args = engine(batch), bench_inputs(graph, batch, dtype, "cuda")
            compiled(*args)

            def run():
                compiled(*args)
                torch.cuda.synchronize()

            return run

        def outputs(args):
            out = engine(args[0].shape[0])(*(a.to(dtype).cuda() if a.is_floating_point() else a.cuda() for a in args))
            out = out if isinstance(out, (tuple, list)) else (out,)
            return tuple(o.float().cpu() for o in out)

        return Prepared(bind, outputs)


register(TensorRT())
