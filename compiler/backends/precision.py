"""Lower precision: bf16 (eager, torch.compile; CUDA also fp16) and int8 (ONNX Runtime's dynamic
or static quantization of the linear layers), each measured against fp32 before anyone uses it.

    result = apply_precision(model, graph, "bf16", target="eager")
    result.model              # the bf16 module (a deep copy: `model` stays fp32)
    result.deviation.summary()  'max |bf16 - fp32| 3.1e-02 (logits up to 2.4e+00), top-1 agreement 62/64 ...'

    result = apply_precision(model, graph, "int8", target="onnx", onnx_path="build/x/model.onnx")
    result.files              # ['build/x/model.int8.onnx']

What is supported where (on a CPU; CUDA adds fp16 and bf16 for eager and compile):

    precision   eager / compile            onnx (ONNX Runtime, CPU)            tensorrt
    bf16        yes (AVX512-BF16, AMX)     no: the CPU provider has no bf16   fp16 only (its own flag)
                                           MatMul or Add kernels
    fp16        CUDA only                  not offered                         yes (build --precision)
    int8        no (ONNX Runtime only)     dynamic quantization of MatMul     no
                                           and Gemm weights (VNNI); static
                                           with a calibration (calibration.py)

The deviation is measured, never assumed: the maximum |low - fp32| over the outputs for fixed
inputs (the seed-0 example inputs, `example_inputs`), and, for outputs that end in a class or
vocabulary axis, the share of random inputs whose top-1 class is the same. Both depend on the
weights: with seeded random weights (no --weights) a classifier's logits are nearly tied, so
its top-1 agreement is a pessimistic figure; with trained weights it is higher.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from archspec.core.errors import error
from archspec.core.ir import Graph
from archspec.core.types import Sym
from archspec.primitives.decoding import CLASSES, LOGITS, role_of
from archspec.primitives.ops.constant import CONSTANT, index_axis

from ..hierarchy import copy_model
from ..quiet import quiet_logger
from .calibration import Calibration
from .export import example_inputs
from .registry import get as get_target

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def unsupported(precision: str, target: str, device: str = "cpu") -> str | None:
    """Why `precision` cannot run on `target` here, or None when it can (the target says)."""
    return get_target(target).precision_reason(precision, device)


def cpu_has_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False  # the CPU's flags are unknown (no /proc/cpuinfo, another architecture): not assumed


# -- the deviation from fp32 ----------------------------------------------------------------------------


@dataclass
class Deviation:
    """How far a lower-precision artifact is from fp32, measured on fixed and random inputs."""

    precision: str
    target: str
    max_abs: float  # max |low - fp32| over every output, fixed inputs
    scale: float  # max |fp32| over the same outputs: what max_abs compares with
    mean_abs: float
    top1_agree: int | None = None  # random inputs (or positions) whose top-1 is the same
    top1_total: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def top1(self) -> float | None:
        return None if not self.top1_total else self.top1_agree / self.top1_total

    def summary(self) -> str:
        text = (f"{self.precision} ({self.target}): max |{self.precision} - fp32| {self.max_abs:.2e} "
                f"(outputs up to {self.scale:.2e}), mean {self.mean_abs:.2e}")
        if self.top1_total:
            text += f", top-1 agreement {self.top1_agree}/{self.top1_total} ({100 * self.top1:.1f}%) on random inputs"
        return text

    def to_json(self) -> dict:
        return {"precision": self.precision, "target": self.target, "max_abs": self.max_abs, "scale": self.scale,
                "mean_abs": self.mean_abs, "top1_agree": self.top1_agree, "top1_total": self.top1_total,
                "top1": self.top1, "notes": self.notes}


def _outputs(value) -> tuple[torch.Tensor, ...]:
    value = value if isinstance(value, (tuple, list)) else (value,)
    return tuple(torch.as_tensor(v).float() for v in value)


def _has_class_axis(graph: Graph) -> list[bool]:
    """Per output: does its last axis hold classes or a vocabulary (a head/classify, lm, distilled
    output), where top-1 agreement means something?"""
    flags = []
    for out in graph.outputs:
        flags.append(role_of(graph.node(out.node)) in (CLASSES, LOGITS))
    return flags


def measure_deviation(reference, candidate, graph: Graph, precision: str, target: str, batch: int = 4,
                      samples: int = 64, seed: int = 0, inputs: list | None = None) -> Deviation:
    """`reference` and `candidate` map a tuple of fp32 input tensors to their outputs (tensors or
    arrays; the candidate casts internally). Max |difference| on the fixed example inputs at
    `batch`; top-1 agreement over `samples` random inputs (in batches of `batch`). Both are called
    on the tuples of `inputs`, by default deviation_inputs(graph, batch, samples, seed)."""
    fixed, *random = inputs if inputs is not None else deviation_inputs(graph, batch, samples, seed)
    want, got = _outputs(reference(fixed)), _outputs(candidate(fixed))
    if len(want) != len(got):
        raise ValueError(f"{len(got)} outputs compared with {len(want)}")
    gaps = [(g - w).abs() for g, w in zip(got, want)]
    dev = Deviation(precision, target, max_abs=float(torch.stack([g.max() for g in gaps]).max()),
                    scale=float(torch.stack([w.abs().max() for w in want]).max()),
                    mean_abs=float(torch.cat([g.flatten() for g in gaps]).mean()))
    classes = _has_class_axis(graph)
    if any(classes) and random:
        agree = total = 0
        for args in random:
            want, got = _outputs(reference(args)), _outputs(candidate(args))
            for w, g, is_class in zip(want, got, classes):
                if is_class:
                    same = w.argmax(-1) == g.argmax(-1)
                    agree += int(same.sum())
                    total += same.numel()
        dev.top1_agree, dev.top1_total = agree, total
    return dev


def deviation_inputs(graph: Graph, batch: int, samples: int, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    """The input tuples measure_deviation feeds both sides: the fixed example inputs at `batch`,
    then, when an output holds classes, `samples` random inputs in batches of `batch`."""
    inputs = [example_inputs(graph, batch=batch)]
    if any(_has_class_axis(graph)) and samples > 0:
        generator = torch.Generator().manual_seed(seed + 1)
        inputs += [_random_inputs(graph, min(batch, samples - start), generator)
                   for start in range(0, samples, batch)]
    return inputs


def _random_inputs(graph: Graph, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    base = example_inputs(graph, batch=batch)
    out = []
    for a in base:
        if a.is_floating_point():
            out.append(torch.randn(a.shape, generator=generator))
        else:
            high = int(a.max()) + 1 if a.numel() else 2
            out.append(torch.randint(0, max(2, high), a.shape, generator=generator))
    return tuple(out)


# -- applying a precision -------------------------------------------------------------------------------


@dataclass
class PrecisionResult:
    precision: str
    target: str
    model: torch.nn.Module | None = None  # eager/compile: the module in that precision (a copy)
    files: list[str] = field(default_factory=list)  # onnx: the quantized model
    deviation: Deviation | None = None
    notes: list[str] = field(default_factory=list)
    method: str | None = None  # int8: "dynamic" or "static"
    calibration: str | None = None  # int8 static: what it was calibrated on

    def summary(self) -> str:
        parts = [self.deviation.summary()] if self.deviation is not None else []
        return "; ".join(parts + self.notes)

    def to_json(self) -> dict:
        return {"precision": self.precision, "target": self.target, "files": [os.path.basename(f) for f in self.files],
                "deviation": None if self.deviation is None else self.deviation.to_json(), "notes": self.notes,
                **({"method": self.method, "calibration": self.calibration} if self.method else {})}


EXACT_WHOLE = {"bf16": 256, "fp16": 2048}  # every whole number up to this is exact (8 and 11 significant bits)


def inexact_indices(graph: Graph, precision: str) -> list[str]:
    """A note for each `constant` of `fill: index` that counts past the whole numbers `precision`
    holds exactly: it runs in the model's floats, so in bf16 257 reads 256, and a table computed
    from it (VideoMAE's sinusoids, FNet's DFT: up to 0.64 off in the trials) is wrong while the
    deviation from fp32 of random weights looks ordinary."""
    most = EXACT_WHOLE.get(precision)
    notes = []
    for node in graph.nodes():
        if most is None or node.is_input or node.op is not CONSTANT or node.params.fill != "index":
            continue
        size = node.type.shape[index_axis(node.params)]
        largest = (size.hi if isinstance(size, Sym) else size) - 1
        if largest > most:
            notes.append(f"constant '{node.name}' counts to {largest}, and {precision} holds whole numbers exactly "
                         f"only up to {most}: what is computed from it (a position or Fourier table) is off in "
                         f"{precision}; keep this model in fp32, make a sinusoid table with `constant: {{fill: "
                         f"sinusoid}}` (exact at build), or give the table as a `param` loaded from a checkpoint")
    return notes


def cast_model(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """A deep copy of `model` in bf16 or fp16 (eval mode); `model` itself is left as it is."""
    low = copy_model(model).to(DTYPES[precision])
    return low.eval()


def eager_runner(model: torch.nn.Module, dtype: torch.dtype | None = None):
    """args (fp32) -> outputs, running `model` in inference mode with float inputs cast to `dtype`."""
    def run(args):
        if dtype is not None:
            args = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
        with torch.inference_mode():
            return model(*args)

    return run


def onnx_runner(path: str, graph: Graph, threads: int | None = None):
    """args (fp32 tensors) -> outputs (numpy arrays) from an ONNX Runtime CPU session (spinning off)."""
    from .timing import onnxruntime_session

    session = onnxruntime_session(path, threads=threads)
    names = [n.name for n in graph.inputs()]

    def run(args):
        return session.run(None, {n: a.numpy() for n, a in zip(names, args)})

    return run


@dataclass(frozen=True)
class PrecisionRequest:
    """What apply_precision was asked, handed to the target that makes the artifact."""

    precision: str
    target: str
    onnx_path: str | None = None
    out_path: str | None = None
    device: str = "cpu"
    measure: bool = True
    batch: int = 4
    samples: int = 64
    calibration: Calibration | None = None  # int8: static quantization calibrated on these inputs


def apply_precision(model: torch.nn.Module, graph: Graph, precision: str, target: str = "eager", *,
                    onnx_path: str | None = None, out_path: str | None = None, device: str = "cpu",
                    measure: bool = True, batch: int = 4, samples: int = 64,
                    calibration: Calibration | None = None) -> PrecisionResult:
    """What `archspec build --precision P --target T` needs: the artifact in that precision and
    its deviation from fp32, made by the target (targets/):

      eager, compile, export: a bf16/fp16 copy of `model` (result.model); export it as usual.
      onnx + int8: `onnx_path` (the fp32 model.onnx) quantized to `out_path` (default
        model.int8.onnx beside it), result.files = [out_path]; dynamically, or statically with
        the activation ranges of `calibration`'s inputs.
      tensorrt + fp16: nothing here (the engine build casts), a note saying so.
      onnx + bf16/fp16, eager + int8, ...: a SpecError saying why (`unsupported`).

    With `measure` (default), result.deviation holds the measured deviation (see the module
    docstring); fp32 returns the model as it is with no deviation."""
    reason = unsupported(precision, target, device)
    if reason is not None:
        raise error(f"--precision {precision} with --target {target}: {reason}")
    if precision == "fp32":
        return PrecisionResult(precision, target, model=model)
    model.eval()
    request = PrecisionRequest(precision, target, onnx_path, out_path, device, measure, batch, samples, calibration)
    return get_target(target).apply_precision(model, graph, request)


def cast_precision(model: torch.nn.Module, graph: Graph, request: PrecisionRequest,
                   compiled: bool = False) -> PrecisionResult:
    """A bf16 or fp16 copy of `model` on the request's device, measured against `model` (run
    through torch.compile when `compiled`)."""
    precision, device = request.precision, request.device
    result = PrecisionResult(precision, request.target)
    low = cast_model(model, precision)
    if device != "cpu":
        low = low.to(device)
    result.model = low
    result.notes.extend(inexact_indices(graph, precision))
    if request.measure:
        reference = eager_runner(model)
        candidate = eager_runner(torch.compile(low) if compiled else low, DTYPES[precision])
        if device != "cpu":
            inner = candidate

            def candidate(args):
                return _outputs(inner(tuple(a.to(device) for a in args)))

        result.deviation = measure_deviation(reference, lambda a: _outputs(candidate(a)), graph, precision,
                                             request.target, batch=request.batch, samples=request.samples)
    return result


def int8_precision(graph: Graph, request: PrecisionRequest) -> PrecisionResult:
    """The fp32 model.onnx (`request.onnx_path`) quantized to int8 beside it, measured against it."""
    onnx_path = request.onnx_path
    if onnx_path is None:
        raise error("--precision int8 needs the fp32 model.onnx to quantize")
    result = PrecisionResult("int8", request.target)
    out_path = request.out_path or os.path.splitext(onnx_path)[0] + ".int8.onnx"
    if request.calibration is None:
        info = quantize_onnx_int8(onnx_path, out_path)
        how = "dynamic: activations u8 per call"
    else:
        info = quantize_onnx_int8_static(onnx_path, out_path, graph, request.calibration)
        how = f"static: activations u8 at ranges calibrated on {request.calibration.source}"
    result.method = "static" if request.calibration is not None else "dynamic"
    result.calibration = None if request.calibration is None else request.calibration.source
    result.files.append(out_path)
    result.notes.append(f"{info['quantized']} of {info['candidates']} MatMul/Gemm quantized to int8 "
                        f"({how}, weights s8 {info['weights']})")
    if request.measure:
        result.deviation = measure_deviation(onnx_runner(onnx_path, graph), onnx_runner(out_path, graph), graph,
                                             "int8", request.target, batch=request.batch, samples=request.samples)
    return result


# -- int8: ONNX Runtime's quantization ---------------------------------------------------------------


def _quantization_tools():
    try:
        import onnx
        import onnxruntime.quantization as quantization
    except ImportError:
        raise error("--precision int8 needs onnxruntime (with its quantization tools) and onnx",
                    hint="pip install onnxruntime onnx") from None
    return onnx, quantization


def quantize_onnx_int8_static(src: str, dst: str, graph: Graph, calibration: Calibration,
                              per_channel: bool = True) -> dict:
    """ONNX Runtime's static quantization of the MatMul/Gemm layers whose weight is a constant
    (QDQ: QuantizeLinear/DequantizeLinear pairs that ONNX Runtime runs as integer matmuls, u8
    activations x s8 weights, per output channel), the activations' ranges measured (min/max)
    on the calibration's inputs. Returns {quantized, candidates, weights}."""
    onnx, quantization = _quantization_tools()
    names = [node.name for node in graph.inputs()]
    feeds = iter([{n: a.numpy() for n, a in zip(names, batch)} for batch in calibration.batches])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self):
            return next(feeds, None)

    with quiet_logger(""):  # ONNX Runtime's quantizer advises pre-processing on the root logger
        quantization.quantize_static(src, dst, Reader(), quant_format=quantization.QuantFormat.QDQ,
                                     op_types_to_quantize=["MatMul", "Gemm"], per_channel=per_channel,
                                     activation_type=quantization.QuantType.QUInt8,
                                     weight_type=quantization.QuantType.QInt8,
                                     extra_options={"MatMulConstBOnly": True})
    model, quantized = onnx.load(src), onnx.load(dst)
    fed_by = {out: n for n in quantized.graph.node for out in n.output}
    done = sum(1 for n in quantized.graph.node if n.op_type in ("MatMul", "Gemm")
               and all(getattr(fed_by.get(i), "op_type", None) == "DequantizeLinear" for i in n.input[:2]))
    return {"quantized": done, "candidates": sum(1 for n in model.graph.node if n.op_type in ("MatMul", "Gemm")),
            "weights": "per channel" if per_channel else "per tensor"}


def quantize_onnx_int8(src: str, dst: str, per_channel: bool = True) -> dict:
    """ONNX Runtime's dynamic quantization of the MatMul/Gemm weights (int8, per output channel),
    activations quantized to uint8 per call: u8 x s8 is what VNNI (AVX512-VNNI / AVX-VNNI)
    multiplies natively. Returns {quantized, candidates, weights}."""
    onnx, quantization = _quantization_tools()
    model = onnx.load(src)
    candidates = sum(1 for n in model.graph.node if n.op_type in ("MatMul", "Gemm"))
    with quiet_logger(""):  # ONNX Runtime's quantizer advises pre-processing on the root logger
        quantization.quantize_dynamic(src, dst, op_types_to_quantize=["MatMul", "Gemm"], per_channel=per_channel,
                                      weight_type=quantization.QuantType.QInt8,
                                      extra_options={"MatMulConstBOnly": True})
    quantized = onnx.load(dst)
    kinds = ("MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm", "DynamicQuantizeLinear")
    done = sum(1 for n in quantized.graph.node if n.op_type in kinds[:4])
    if done == 0:
        done = sum(1 for n in quantized.graph.node if n.op_type == "DynamicQuantizeLinear")
    return {"quantized": done, "candidates": candidates,
            "weights": "per channel" if per_channel else "per tensor"}
