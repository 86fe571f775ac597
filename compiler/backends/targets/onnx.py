"""onnx: model.onnx (dynamic batch) from torch's exporter, checked against ONNX Runtime; with
--precision int8, model.int8.onnx (quantized from model.onnx) beside it. Benched in ONNX Runtime
on the CPU.

model.onnx is the optimised export by default (opset 23: attention is one `Attention` op, GELU
one `Gelu`; ONNX Runtime fuses each linear's bias into it at load), the file `archspec bench`
times; `build --plain-onnx` writes the opset 18 export instead (attention spelled out), for
runtimes without opset 23. Both go through `write_model_onnx` (backends/onnx.py), so what is
built and what is benched cannot drift apart; report.json's "onnx" section says what the file
holds, read back from it. A spec that generates also gets its decode programs beside it, checked
in ONNX Runtime the same way (decode_step.py's `decode_programs`: prefill.onnx and
decode_step.onnx, or an encoder-decoder's encoder.onnx, decoder_prefill.onnx and decoder_step.onnx)."""

from __future__ import annotations

import json
import os

from . import register
from .base import Target


class Onnx(Target):
    name = "onnx"
    doc = "model.onnx (fused attention, dynamic batch; --plain-onnx: opset 18), run by ONNX Runtime on the CPU"
    artifacts = "+ model.onnx (fused attention, opset 23; --plain-onnx: opset 18)"
    commands = ("build", "bench")
    build_precisions = ("fp32", "int8")
    bench_precisions = ("fp32", "int8")
    precision_docs = {"int8": "model.int8.onnx beside model.onnx"}
    needs = ("export",)
    materializes_scores = True  # ONNX Runtime's attention, fused or spelled out, holds the scores (checked at batch 3)
    order = 40
    packages = ("onnx", "onnxscript", "onnxruntime")
    install = "pip install 'archspec-compiler[onnx]'"

    def precision_problem(self, precision: str, device: str) -> str | None:
        if precision == "int8":
            return None
        return (f"ONNX Runtime's CPU provider has no {precision} kernels for MatMul and Add; {precision} ONNX "
                "needs a GPU provider (CUDA, TensorRT)")

    def apply_precision(self, model, graph, request):
        from ..precision import int8_precision

        return int8_precision(graph, request)

    def steps(self, precision: str) -> int:
        return 2 if precision == "int8" else 1

    def build(self, context):
        """model.onnx in the variant asked for (`context.plain_onnx`, set by build's --plain-onnx),
        checked against ONNX Runtime; returns the OnnxResult (report.json's "onnx" section)."""
        from ..decode_step import decode_programs
        from ..onnx import write_model_onnx

        path = context.path("model.onnx")
        variant = onnx_variant(context)
        what = "opset 18, attention spelled out" if variant == "plain" else "fused for ONNX Runtime"
        title = f"ONNX ({what}, dynamic batch) -> model.onnx"

        programs = decode_programs(context.graph, ".onnx")  # and a spec that generates, its decode programs

        def run():
            made = write_model_onnx(context.model, context.graph, path, variant)
            context.written.append(path)
            if programs is not None:
                paths = [context.path(name) for name in programs.files]
                made.decode_gaps = programs.save(context.model, *paths)
                context.written.extend(paths)
            return made

        if programs is not None:  # the decode programs are opset 18, attention spelled out (docs/generate.md)
            title += ", " + programs.listed("opset 18, attention written out" if variant != "plain" else "")
        result = context.progress.run(title, run, describe)
        if not result.contents.portable:  # which runtimes can load it, said where the user sees it
            context.notes.append(f"model.onnx runs on {result.contents.runs_on()}")
        if context.precision == "int8":
            self.quantize(context, path)
        return result

    def quantize(self, context, source: str) -> None:
        """model.int8.onnx beside model.onnx, its deviation from it measured and kept in precision.json."""
        from ..precision import apply_precision

        def run():
            calibration = None
            if context.calibration is not None:
                from ..calibration import calibration as calibration_of

                calibration = calibration_of(context.graph, context.calibration)
            return apply_precision(context.model, context.graph, "int8", target=self.name, onnx_path=source,
                                   calibration=calibration)

        how = "dynamic" if context.calibration is None else f"static, calibrated on {context.calibration}"
        result = context.progress.run(f"quantize the linear layers to int8 ({how}) -> model.int8.onnx", run,
                                      lambda r: r.summary())
        context.written.extend(result.files)
        context.write_text("precision.json", json.dumps(result.to_json(), indent=2))

    def bench(self, model, graph, precision: str, *, workdir: str, threads: int, device: str):
        """archspec's optimised graph in an ONNX Runtime session (int8: quantized first)."""
        import torch

        from ..bench import Prepared, bench_inputs
        from ..onnx import write_model_onnx
        from ..precision import quantize_onnx_int8
        from ..timing import onnxruntime_session

        path = os.path.join(workdir, "model.onnx")
        note = None
        if not os.path.exists(path):  # the file `build --target onnx` writes (bench measures its deviation itself)
            result = write_model_onnx(model, graph, path, verify=False)
            fused = ", ".join(f.describe() for f in result.fusions)
            note = f"opset {result.opset}, " + (f"fused {fused}" if fused else "no op fused")
        if precision == "int8":
            quantized = os.path.join(workdir, "model.int8.onnx")
            if not os.path.exists(quantized):
                quantize_onnx_int8(path, quantized)
            path = quantized
        session = onnxruntime_session(path, threads=threads)
        names = [n.name for n in graph.inputs()]

        def bind(batch: int):
            feeds = {n: a.numpy() for n, a in zip(names, bench_inputs(graph, batch))}
            return lambda: session.run(None, feeds)

        def outputs(args):
            return tuple(torch.from_numpy(o) for o in session.run(None, {n: a.numpy() for n, a in zip(names, args)}))

        return Prepared(bind, outputs, note)


def onnx_variant(context) -> str:
    """"plain" when the build asked for --plain-onnx, else "optimized"."""
    return "plain" if context.plain_onnx else "optimized"


def describe(result) -> str:
    """The build line's detail: what model.onnx holds (and how far the decode programs are from eager)."""
    gaps = result.decode_gaps
    if not gaps:
        return result.summary()
    each = ", ".join(f"{name.removesuffix('_gap').replace('_', ' ')} {gap:.2e}" for name, gap in gaps.items())
    return result.summary() + f"; max |onnxruntime - eager| {each}"


register(Onnx())
