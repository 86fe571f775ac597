"""TensorRT backend: torch-tensorrt's dynamo path, fp32 or fp16, a static batch or a range.

Coverage first. `check_coverage` lowers the exported program exactly as torch-tensorrt does
before it converts (its pre-export passes, its decompositions, its post-lowering passes) and
asks torch-tensorrt's own partitioner, node by node, whether the op converts. Nothing may
fall back to PyTorch: every op that would is a located diagnostic (archspec node path and
spec file:line, read from the fx node's stack trace and module stack), and building stops.

    archspec check SPEC --target tensorrt [--batch N | MIN:OPT:MAX]     coverage only
    archspec build SPEC --target tensorrt [--precision fp16] [--batch ...]

Building runs in a child process (a crash of the TensorRT builder becomes an archspec error,
not a dead `archspec`), in one of two ways:

  * with a CUDA GPU: torch_tensorrt.dynamo.compile(require_full_compilation=True), saved with
    torch_tensorrt.save as model.trt.pt2 (load: `import torch_tensorrt;
    torch.export.load("model.trt.pt2").module()`), plus the raw engine model.engine; the
    reloaded module is run and compared with eager (fp32: max error 1e-3; fp16: reported).
  * without a GPU, with torch-tensorrt-rtx: the serialized engine is built ahead of time on
    the CPU (TensorRT-RTX needs no GPU to build) and written to model.engine. It targets
    RTX-class GPUs and was not run here. torch-tensorrt's CUDA questions are answered in
    compiler/backends/cuda_stub.py, and only there.

Precision is the dtype of the exported graph: for fp16 the model is cast with .half() before
torch.export (TensorRT-RTX networks are strongly typed; the old `enabled_precisions` knob is
ignored there). tensorrt.json beside the engine names its bindings and shape profile.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import operator
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch

from archspec.core.errors import Diagnostic, Loc, SpecError, UsageError, bug, error
from archspec.core.ir import Graph
from archspec.core.types import Sym

from ..hierarchy import copy_model
from ..lower import locate, module_paths_of
from .batch import BatchRange
from .cuda_stub import gpu_present, no_gpu_answers, plan_only_runtime
from .export import dynamic_shapes, example_inputs, max_abs_difference, with_spec_frames

INSTALL_HINT = ("pip install 'archspec[tensorrt-rtx]' (RTX-class GPUs; builds engines even on a machine "
                "without a GPU) or 'archspec[tensorrt]' (data-centre GPUs; needs a CUDA GPU to build)")
FP32_TOLERANCE = 1e-3
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
RTX_TARGET = ("RTX-class NVIDIA GPUs (Ampere or newer: SM 8.0, 8.6, 8.9, 12.0+) with TensorRT-RTX "
              "{version}; its kernels are compiled on that GPU at first run")

# Where torch-tensorrt's registry says an op converts but its converter cannot do it
# (torch-tensorrt 2.14): (aten op, test on the fx node, why).
_KNOWN_FAILURES = [
    ("aten.repeat.default", lambda node: any(isinstance(a, torch.fx.Node) for a in node.args[1]),
     "repeat by a symbolic size (the batch) does not convert"),
]
_HINTS = {  # what to write in the primitive's module instead
    "aten.gather.default": "gather has no dynamic-shape converter; use index_select or x[index], "
                           "or build for a static batch (--batch N)",
    "aten.repeat.default": "broadcast with expand(batch, ...) instead of repeat (as compiler/modules/attention/window.py "
                           "does for the shift mask)",
}


# -- torch-tensorrt --------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet():
    """torch-tensorrt logs and warns freely while lowering; keep `archspec` output readable."""
    loggers = [logging.getLogger(name) for name in ("torch_tensorrt", "torch_tensorrt.dynamo", "modelopt")]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


@contextlib.contextmanager
def _silence_stderr_fd():
    """The TensorRT C++ library prints a device warning straight to fd 2 at import."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (e.g. captured streams): nothing to hide
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load_torch_tensorrt():
    """`import torch_tensorrt`, answering its CUDA questions if there is no GPU; else a clear
    error saying what to install."""
    if "torch_tensorrt" in sys.modules:
        return sys.modules["torch_tensorrt"]
    if importlib.util.find_spec("torch_tensorrt") is None:
        raise error("--target tensorrt needs torch-tensorrt, which is not installed", hint=INSTALL_HINT)
    try:
        with no_gpu_answers(), _quiet(), _silence_stderr_fd():
            import torch_tensorrt
    except Exception as exc:  # noqa: BLE001 - a broken install, reported plainly
        sys.modules.pop("torch_tensorrt", None)
        first = (str(exc).strip().splitlines() or [""])[0]
        raise error(f"torch-tensorrt is installed but does not import: {type(exc).__name__}: {first}",
                    hint=f"it must match torch {torch.__version__.split('+')[0]}; reinstall with "
                         f"{INSTALL_HINT}") from None
    return torch_tensorrt


def is_rtx(tt) -> bool:
    return bool(getattr(tt.ENABLED_FEATURES, "tensorrt_rtx", False))


def backend_name(tt) -> str:
    trt = sys.modules.get("tensorrt")
    trt_version = getattr(trt, "__version__", "?")
    if is_rtx(tt):
        return f"torch-tensorrt-rtx {tt.__version__.split('+')[0]}, TensorRT-RTX {trt_version}"
    return f"torch-tensorrt {tt.__version__.split('+')[0]}, TensorRT {trt_version}"


def _settings_kwargs(tt, precision: str, **extra) -> dict:
    """The compile settings archspec uses, limited to those this torch-tensorrt knows (it
    silently swallows unknown keyword arguments)."""
    from dataclasses import fields

    known = {f.name for f in fields(tt.dynamo.CompilationSettings)}
    kw = dict(require_full_compilation=True, min_block_size=1, disable_tf32=precision == "fp32",
              offload_module_to_cpu=not gpu_present(), **extra)  # (no torch.cuda.mem_get_info without a GPU)
    if not is_rtx(tt):  # data-centre TensorRT: follow the graph's dtypes (model.half() for fp16)
        kw.update(use_explicit_typing=True, enabled_precisions={DTYPES[precision]})
    return {k: v for k, v in kw.items() if k in known}


# -- export ----------------------------------------------------------------------------------------


def export_for_tensorrt(model: torch.nn.Module, graph: Graph, precision: str = "fp32",
                        batch=None) -> torch.export.ExportedProgram:
    """torch.export the eager model in the engine's precision, dynamic in the batch range (or
    static), and dynamic in the spec's other symbolic lengths."""
    batch = BatchRange.of(batch)
    args = _example_args(graph, precision, batch.example)
    if precision != "fp32":
        model = copy_model(model).to(DTYPES[precision])
    model.eval()
    dyn = dynamic_shapes(graph, None if batch.static else (batch.min, batch.max))
    if batch.static:
        dyn = {name: {axis: d for axis, d in axes.items() if not _is_batch_axis(graph, name, axis)}
               for name, axes in dyn.items()}
    with torch.no_grad(), _quiet():
        return with_spec_frames(torch.export.export(model, args, dynamic_shapes=dyn, strict=False), graph)


def _is_batch_axis(graph: Graph, name: str, axis: int) -> bool:
    d = graph.node(name).type.shape[axis]
    return isinstance(d, Sym) and d.name == "B"


def _example_args(graph: Graph, precision: str, batch: int) -> tuple:
    args = example_inputs(graph, batch=batch)
    return tuple(a.to(DTYPES[precision]) if a.is_floating_point() else a for a in args)


def input_profiles(graph: Graph, precision: str, batch) -> list[dict]:
    """Per input: name, dtype and min/opt/max shapes (the engine's optimisation profile)."""
    batch = BatchRange.of(batch)
    profiles = []
    for node, example in zip(graph.inputs(), example_inputs(graph, batch=1)):
        lo, opt, hi, dims = [], [], [], {}
        for axis, d in enumerate(node.type.shape):
            if isinstance(d, Sym):
                dims[axis] = d.name
            if isinstance(d, Sym) and d.name == "B":
                sizes = (batch.min, batch.opt, batch.max)
            elif isinstance(d, Sym):
                sizes = (d.lo, example.shape[axis], d.hi)
            else:
                sizes = (d, d, d)
            for out, size in zip((lo, opt, hi), sizes):
                out.append(int(size))
        dtype = "int64" if not example.is_floating_point() else str(DTYPES[precision]).replace("torch.", "")
        profiles.append({"name": node.name, "dtype": dtype, "min": lo, "opt": opt, "max": hi,
                         "dynamic_axes": {axis: name for axis, name in dims.items() if lo[axis] != hi[axis]}})
    return profiles


# -- coverage --------------------------------------------------------------------------------------


@dataclass
class Fallback:
    """One fx node that would not convert."""

    op: str
    fx_node: str
    path: str | None
    loc: Loc | None
    reason: str

    def record(self) -> dict:
        loc = self.loc
        return {"op": self.op, "fx_node": self.fx_node, "path": self.path, "file": loc.file if loc else None,
                "line": loc.line if loc else None, "col": loc.col if loc else None, "reason": self.reason}


@dataclass
class CoverageReport:
    """Which ops of a spec's exported graph convert to TensorRT (nothing may fall back)."""

    name: str
    file: str | None
    backend: str
    precision: str
    batch: BatchRange
    ops: Counter = field(default_factory=Counter)  # aten op -> count, after torch-tensorrt's lowering
    fallbacks: list[Fallback] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def converted(self) -> int:
        return self.total - len(self.fallbacks)

    @property
    def complete(self) -> bool:
        return not self.fallbacks

    def headline(self) -> str:
        share = 100.0 * self.converted / self.total if self.total else 100.0
        text = f"{self.converted} of {self.total} ops convert ({share:.{0 if self.complete else 1}f}%)"
        if self.complete:
            return text + ", nothing falls back to PyTorch"
        return text + f"; {len(self.fallbacks)} would fall back to PyTorch"

    def summary(self) -> str:
        lines = [f"TensorRT coverage ({self.backend}; {self.precision}, {self.batch.describe()}): {self.headline()}"]
        for (op, path, loc, reason), count in self._groups().items():
            where = f"{loc}: " if loc else ""
            lines.append(f"  {where}{path or '<no archspec node>'}: {op} x{count}: {reason}")
        return "\n".join(lines)

    def _groups(self) -> Counter:
        return Counter((f.op, f.path, f.loc, f.reason) for f in self.fallbacks)

    def diagnostics(self) -> list[Diagnostic]:
        out = []
        for (op, path, loc, reason), count in self._groups().items():
            times = f" ({count} times)" if count > 1 else ""
            out.append(Diagnostic(
                f"{op} does not convert to TensorRT{times}: {reason}, and nothing may fall back to PyTorch "
                f"({self.precision}, {self.batch.describe()})",
                loc or (Loc(self.file, 1, 1) if self.file else None), path,
                _HINTS.get(op, "write the primitive's module with ops that TensorRT converts, or build "
                               "--target onnx")))
        return out

    def to_json(self) -> dict:
        return {"backend": self.backend, "precision": self.precision,
                "batch": {"min": self.batch.min, "opt": self.batch.opt, "max": self.batch.max},
                "complete": self.complete, "ops": self.total, "converted": self.converted,
                "op_counts": dict(sorted(self.ops.items())),
                "fallbacks": [f.record() for f in self.fallbacks]}

    def raise_if_incomplete(self) -> None:
        if not self.complete:
            raise SpecError(self.diagnostics())


def _op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # 'aten.gather.default'
    return getattr(target, "__name__", str(target))


def check_coverage(program: torch.export.ExportedProgram, graph: Graph, precision: str = "fp32",
                   batch=None) -> CoverageReport:
    """Lower `program` as torch-tensorrt does before converting and ask its partitioner about
    every op. (torch-tensorrt's pre-export passes edit the program's graph in place; they keep
    its meaning.)"""
    batch = BatchRange.of(batch)
    tt = load_torch_tensorrt()
    start = time.perf_counter()
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS
    from torch_tensorrt.dynamo.lowering import get_decompositions, post_lowering, pre_export_lowering
    from torch_tensorrt.dynamo.partitioning._global_partitioner import TorchTensorRTOperatorSupport

    with no_gpu_answers(), _quiet():
        settings = tt.dynamo.CompilationSettings(**_settings_kwargs(tt, precision))
        program = pre_export_lowering(program, settings)
        program = program.run_decompositions(get_decompositions(
            settings.enable_experimental_decompositions, settings.decompose_attention,
            settings.use_distributed_mode_trace, use_fp32_acc=settings.use_fp32_acc))
        gm = post_lowering(program.module(), settings)
        DYNAMO_CONVERTERS.set_compilation_settings(settings)  # as torch-tensorrt's compile does
        support = TorchTensorRTOperatorSupport(torch_executed_ops=settings.torch_executed_ops)
        modules = dict(gm.named_modules())
        report = CoverageReport(graph.name, graph.file, backend_name(tt), precision, batch)
        for node in gm.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            op = _op_name(node.target)
            report.ops[op] += 1
            reason = None
            if not support.is_node_supported(modules, node):
                reason = "torch-tensorrt has no converter for it" + ("" if batch.static else " with a dynamic batch")
            else:
                for name, test, why in _KNOWN_FAILURES:
                    if op == name and test(node):
                        reason = why
                        break
            if reason:
                path, loc = locate(graph, node.meta.get("stack_trace"), module_paths_of(node))
                report.fallbacks.append(Fallback(op, node.name, path, loc, reason))
    report.seconds = time.perf_counter() - start
    return report


def coverage_report(graph: Graph, batch=None, precision: str = "fp32", seed: int = 0) -> CoverageReport:
    """`archspec check SPEC --target tensorrt`: lower the checked spec, export it for the batch
    (None: 1:8:64, 'N' or 'MIN:OPT:MAX') and check that every op converts. Builds nothing."""
    from ..lower import lower

    try:
        batch = BatchRange.of(batch)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    load_torch_tensorrt()  # the install hint before any work
    model = lower(graph, seed=seed)
    program = export_for_tensorrt(model, graph, precision, batch)
    return check_coverage(program, graph, precision, batch)


# -- engine ----------------------------------------------------------------------------------------


@dataclass
class EngineResult:
    files: list[str]
    notes: list[str]
    backend: str
    precision: str
    batch: BatchRange
    engine_bytes: int
    build_seconds: float
    max_difference: float | None = None  # reloaded engine vs eager (only with a GPU)

    def summary(self) -> str:
        text = f"{self.engine_bytes / 2**20:.1f} MB engine, built in {self.build_seconds:.1f} s ({self.backend})"
        if self.max_difference is not None:
            text += f", max |TensorRT - eager| {self.max_difference:.2e}"
        return text


class _Steps:
    """build.py's Progress when given, else silent."""

    def __init__(self, progress):
        self.progress = progress

    def run(self, title, fn, describe=lambda r: ""):
        return self.progress.run(title, fn, describe) if self.progress is not None else fn()


STEPS = 3  # progress lines build_engine prints: export, coverage, engine


def build_engine(model, graph: Graph, outdir: str, precision: str = "fp32", batch_range=None, *,
                 program: torch.export.ExportedProgram | None = None, progress=None,
                 timeout: float | None = None) -> EngineResult:
    """Check coverage, then build the engine in a child process and write it to `outdir`.

    model: the eager module (a GraphModule, or an fp32 ExportedProgram of it).
    program: an fp32 program already exported for exactly this batch range, to reuse.
    With a GPU: model.trt.pt2 (torch-tensorrt program), model.engine, checked against eager.
    Without one (torch-tensorrt-rtx): model.engine built ahead of time, for RTX-class GPUs.
    Always: tensorrt.json (bindings, shape profile, versions)."""
    if precision not in DTYPES:
        raise error(f"unknown TensorRT precision {precision!r}", hint="use fp32 or fp16")
    batch = BatchRange.of(batch_range)
    tt = load_torch_tensorrt()
    steps = _Steps(progress)
    if isinstance(model, torch.export.ExportedProgram):
        model = model.module()
    if program is None or precision != "fp32":
        program = steps.run(f"torch.export for TensorRT ({precision}, {batch.describe()})",
                            lambda: export_for_tensorrt(model, graph, precision, batch))
    else:
        steps.run("torch.export for TensorRT (reusing model.pt2's program)", lambda: program)

    work = tempfile.mkdtemp(prefix="archspec-tensorrt-")
    try:
        program_path = os.path.join(work, "program.pt2")
        torch.export.save(program, program_path)  # before coverage, whose passes edit the graph
        coverage = steps.run("TensorRT coverage (every op converts, nothing falls back to PyTorch)",
                             lambda: check_coverage(program, graph, precision, batch), lambda c: c.headline())
        coverage.raise_if_incomplete()
        os.makedirs(outdir, exist_ok=True)
        job = _job(tt, graph, outdir, work, program_path, precision, batch)
        if job["mode"] == "gpu":
            reference = os.path.join(work, "reference.pt2")
            fp32 = program if precision == "fp32" else export_for_tensorrt(model, graph, "fp32", batch)
            torch.export.save(fp32, reference)
            job["reference"] = reference
        title = ("TensorRT engine, ahead of time on the CPU (child process)" if job["mode"] == "aot"
                 else "TensorRT compile, save, reload and compare on the GPU (child process)")
        result = steps.run(title, lambda: _run_job(job, graph, timeout), lambda r: r.summary())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _job(tt, graph: Graph, outdir: str, work: str, program_path: str, precision: str, batch: BatchRange) -> dict:
    if gpu_present():
        mode = "gpu"
    elif is_rtx(tt):
        mode = "aot"
    else:
        raise error("no TensorRT engine was built: this machine has no CUDA GPU, and torch-tensorrt (for "
                    "data-centre GPUs) builds engines only on one; the coverage check passed",
                    hint="build on a machine with a GPU, or pip install 'archspec[tensorrt-rtx]' to build an "
                         "engine for RTX-class GPUs ahead of time without one")
    return {
        "mode": mode, "program": program_path, "precision": precision, "work": work,
        "batch": [batch.min, batch.opt, batch.max],
        "inputs": input_profiles(graph, precision, batch),
        "outputs": [o.name for o in graph.outputs],
        "engine": os.path.join(outdir, "model.engine"),
        "saved": os.path.join(outdir, "model.trt.pt2"),
        "metadata": os.path.join(outdir, "tensorrt.json"),
        "decompose_attention": False,
        "spec": {"name": graph.name, "file": graph.file},
    }


def _run_job(job: dict, graph: Graph, timeout: float | None) -> EngineResult:
    notes = []
    result = _spawn(job, timeout)
    if result.get("crashed") and not job["decompose_attention"]:
        # TensorRT-RTX 1.6 crashes on some attention patterns (two SDPAs reading one query,
        # fp32, dynamic batch); the decomposed form builds.
        job = dict(job, decompose_attention=True)
        retry = _spawn(job, timeout)
        if not retry.get("crashed"):
            notes.append(f"the TensorRT builder crashed ({result['crashed']}); the engine was rebuilt with "
                         "attention decomposed into matmul/softmax (decompose_attention=True)")
        result = retry
    if result.get("crashed"):
        raise bug(f"the TensorRT builder crashed ({result['crashed']}) and made no engine, also with attention "
                    f"decomposed; last output: {result.get('tail') or '(none)'}",
                    Loc(graph.file, 1, 1) if graph.file else None,
                    hint="try --precision fp16 or a static batch (--batch N); this is a TensorRT bug, "
                         "not a problem with the spec")
    if not result.get("ok"):
        node = result.get("node") or {}
        path, loc = locate(graph, node.get("stack_trace"), node.get("module_paths") or ())
        op = node.get("op")
        what = f"{op} did not convert to TensorRT" if op else "TensorRT could not build the engine"
        raise bug(f"{what}: {result.get('error', 'unknown error')}",
                    loc or (Loc(graph.file, 1, 1) if graph.file else None), path,
                    hint=_HINTS.get(op or "", "torch-tensorrt's coverage check passed but conversion failed; "
                                              "see the message above"))
    files = [p for p in (job["engine"] if result["bytes"] else None, job["saved"] if job["mode"] == "gpu" else None,
                         job["metadata"]) if p]
    if job["mode"] == "aot":
        notes.append("model.engine was built ahead of time without a GPU: it targets " +
                     RTX_TARGET.format(version=result["trt_version"]) +
                     "; it was not run here (tensorrt.json names its bindings and shapes)")
    gap = result.get("max_difference")
    if gap is not None and job["precision"] == "fp32" and not gap <= FP32_TOLERANCE:  # NaN included
        raise bug(f"the TensorRT engine disagrees with eager: max |TensorRT - eager| = {gap:.2e} > "
                    f"{FP32_TOLERANCE:g} (fp32)", Loc(graph.file, 1, 1) if graph.file else None,
                    hint="this is likely a TensorRT or archspec bug; the files were written anyway")
    if gap is not None and job["precision"] == "fp16":
        notes.append(f"fp16 engine vs fp32 eager: max |difference| = {gap:.2e}")
    return EngineResult(files, notes, result["backend"], job["precision"], BatchRange(*job["batch"]),
                        result["bytes"], result["build_seconds"], gap)


def _spawn(job: dict, timeout: float | None) -> dict:
    path = os.path.join(job["work"], "job.json")
    out = os.path.join(job["work"], "result.json")
    with open(path, "w") as f:
        json.dump(job, f)
    if os.path.exists(out):
        os.remove(out)
    try:
        proc = subprocess.run([sys.executable, "-m", "archspec.compiler.backends.tensorrt", path], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise error(f"the TensorRT engine build took longer than {timeout:.0f} s and was stopped") from None
    tail = " | ".join(line.strip() for line in (proc.stderr or "").strip().splitlines()[-3:])
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return {"crashed": name, "tail": tail}
    if not os.path.exists(out):
        return {"ok": False, "error": f"the build process exited with status {proc.returncode}: {tail}"}
    with open(out) as f:
        return json.load(f)


# -- the child process -----------------------------------------------------------------------------


def _worker(job: dict) -> dict:
    tt = load_torch_tensorrt()
    program = torch.export.load(job["program"])
    settings = _settings_kwargs(tt, job["precision"], decompose_attention=job["decompose_attention"])
    inputs = [tt.Input(min_shape=p["min"], opt_shape=p["opt"], max_shape=p["max"], dtype=getattr(torch, p["dtype"]),
                       name=p["name"], **({"shared_dims": {int(a): n for a, n in p["dynamic_axes"].items()}}
                                          if p["dynamic_axes"] else {}))
              for p in job["inputs"]]
    names = tuple(p["name"] for p in job["inputs"])  # pytrees shaped like forward()'s args and result
    outputs = job["outputs"][0] if len(job["outputs"]) == 1 else tuple(job["outputs"])
    result = {"backend": backend_name(tt), "trt_version": getattr(sys.modules.get("tensorrt"), "__version__", "?")}
    start = time.perf_counter()
    if job["mode"] == "aot":
        with plan_only_runtime(), _quiet():
            plan = tt.dynamo.convert_exported_program_to_serialized_trt_engine(
                program, arg_inputs=inputs, arg_input_binding_names=names, output_binding_names=outputs, **settings)
        result["build_seconds"] = time.perf_counter() - start
    else:
        program = _to_cuda(program)
        with _quiet():
            compiled = tt.dynamo.compile(program, arg_inputs=inputs, **settings)
        result["build_seconds"] = time.perf_counter() - start
        plan = _engine_bytes(compiled)
        tt.save(compiled, job["saved"], output_format="exported_program", arg_inputs=inputs)
        result["max_difference"] = _compare_on_gpu(job)
    if plan:
        with open(job["engine"], "wb") as f:
            f.write(plan)
    result["bytes"] = len(plan or b"")
    with open(job["metadata"], "w") as f:
        json.dump({
            "spec": job["spec"], "backend": result["backend"], "precision": job["precision"],
            "batch": dict(zip(("min", "opt", "max"), job["batch"])),
            "inputs": job["inputs"], "outputs": job["outputs"],
            "engine": os.path.basename(job["engine"]) if plan else None,
            "built": "ahead of time, without a GPU" if job["mode"] == "aot" else "on a CUDA GPU",
            "targets": (RTX_TARGET.format(version=result["trt_version"]) if is_rtx(tt)
                        else "the GPU architecture it was built on, with the same TensorRT version"),
            "torch_tensorrt_program": None if job["mode"] == "aot" else os.path.basename(job["saved"]),
        }, f, indent=2)
    result["ok"] = True
    return result


def _to_cuda(program):
    from torch.export.passes import move_to_device_pass

    return move_to_device_pass(program, "cuda")


def _engine_bytes(compiled) -> bytes | None:
    """The serialized engine of the one TensorRT block of a fully compiled module."""
    for _, module in compiled.named_modules():
        plan = getattr(module, "serialized_engine", None)
        if plan:
            return bytes(plan)
        engine = getattr(module, "engine", None)
        if engine is not None and hasattr(engine, "serialize"):
            return bytes(engine.serialize())
    return None  # model.trt.pt2 holds it anyway


def _compare_on_gpu(job: dict) -> float:
    """Reload model.trt.pt2 as a user would, run it at the min, opt and max batch, compare
    with the fp32 eager program."""
    reference = _to_cuda(torch.export.load(job["reference"])).module()
    loaded = torch.export.load(job["saved"]).module()
    gaps = []
    generator = torch.Generator().manual_seed(0)
    for b in sorted(set(job["batch"])):
        args = []
        for p in job["inputs"]:
            shape = [b] + p["opt"][1:]
            if p["dtype"] == "int64":
                args.append(torch.randint(0, 2, shape, generator=generator).cuda())
            else:
                args.append(torch.randn(shape, generator=generator).cuda())
        low = [a.to(DTYPES[job["precision"]]) if a.is_floating_point() else a for a in args]
        with torch.no_grad():
            expected = reference(*args)
            got = loaded(*low)
        got = tuple(g.float() for g in got) if isinstance(got, (tuple, list)) else got.float()
        gaps.append(max_abs_difference(got, expected))
    return float(torch.tensor(gaps).max())  # NaN if any is (max() would hide a later one)


def _failed_node(exc: BaseException) -> dict | None:
    """The fx node torch-tensorrt was converting when `exc` was raised (from its interpreter)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        found = None
        while tb is not None:
            owner = tb.tb_frame.f_locals.get("self")
            node = getattr(owner, "_cur_node", None)
            if isinstance(node, torch.fx.Node):
                found = node
            tb = tb.tb_next
        if found is not None:
            return {"op": _op_name(found.target), "fx_node": found.name,
                    "stack_trace": found.meta.get("stack_trace"), "module_paths": module_paths_of(found)}
        exc = exc.__cause__ or exc.__context__
    return None


def _main(path: str) -> int:
    with open(path) as f:
        job = json.load(f)
    out = os.path.join(os.path.dirname(path), "result.json")
    try:
        result = _worker(job)
    except SpecError as exc:
        result = {"ok": False, "error": exc.message}
    except Exception as exc:  # noqa: BLE001 - reported by the parent, located where possible
        traceback.print_exc()
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        result = {"ok": False, "error": f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:2000],
                  "node": _failed_node(exc)}
    with open(out, "w") as f:
        json.dump(result, f)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
