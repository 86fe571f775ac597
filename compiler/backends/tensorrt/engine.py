"""Building an engine: `build_engine` (export, coverage, then the build in a child process),
`EngineResult`, and turning what the child reported into the result or a located error.

    archspec build SPEC --target tensorrt [--precision fp16] [--batch N | MIN:OPT:MAX]

With a CUDA GPU the child compiles with torch_tensorrt.dynamo.compile, saves model.trt.pt2
(load: `import torch_tensorrt; torch.export.load("model.trt.pt2").module()`) and model.engine,
and compares the reloaded module with eager (fp32: max error 1e-3; fp16: reported). Without a
GPU, with torch-tensorrt-rtx, it builds model.engine ahead of time on the CPU (TensorRT-RTX
needs no GPU to build); that engine targets RTX-class GPUs and was not run here.
tensorrt.json beside the engine names its bindings and shape profile.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace

import torch

from archspec.core.errors import Loc, bug, error
from archspec.core.ir import Graph

from ..batch import BatchRange
from .coverage import HINTS, check_coverage
from .cuda_stub import gpu_present
from .job import Job, Outcome, run_in_child
from .program import export_for_tensorrt, input_profiles
from .runtime import DTYPES, RTX_TARGET, is_rtx, load_torch_tensorrt

FP32_TOLERANCE = 1e-3
STEPS = 3  # progress lines build_engine prints: export, coverage, engine


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
        job = new_job(tt, graph, outdir, work, program_path, precision, batch)
        if job.mode == "gpu":
            reference = os.path.join(work, "reference.pt2")
            fp32 = program if precision == "fp32" else export_for_tensorrt(model, graph, "fp32", batch)
            torch.export.save(fp32, reference)
            job = replace(job, reference=reference)
        title = ("TensorRT engine, ahead of time on the CPU (child process)" if job.mode == "aot"
                 else "TensorRT compile, save, reload and compare on the GPU (child process)")
        result = steps.run(title, lambda: run_job(job, graph, timeout), lambda r: r.summary())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def new_job(tt, graph: Graph, outdir: str, work: str, program_path: str, precision: str, batch: BatchRange) -> Job:
    """The job for this machine: on its GPU, or ahead of time without one (torch-tensorrt-rtx)."""
    if gpu_present():
        mode = "gpu"
    elif is_rtx(tt):
        mode = "aot"
    else:
        raise error("no TensorRT engine was built: this machine has no CUDA GPU, and torch-tensorrt (for "
                    "data-centre GPUs) builds engines only on one; the coverage check passed",
                    hint="build on a machine with a GPU, or pip install 'archspec-compiler[tensorrt-rtx]' to build an "
                         "engine for RTX-class GPUs ahead of time without one")
    return Job(mode=mode, program=program_path, precision=precision, work=work, batch=batch,
               inputs=tuple(input_profiles(graph, precision, batch)), outputs=tuple(o.name for o in graph.outputs),
               engine=os.path.join(outdir, "model.engine"), saved=os.path.join(outdir, "model.trt.pt2"),
               metadata=os.path.join(outdir, "tensorrt.json"), spec={"name": graph.name, "file": graph.file})


def run_job(job: Job, graph: Graph, timeout: float | None) -> EngineResult:
    """Run `job` in a child process (once more with attention decomposed if the builder
    crashes) and turn its outcome into the result, or into a located error."""
    notes = []
    outcome = run_in_child(job, timeout)
    if outcome.crashed and not job.decompose_attention:
        # TensorRT-RTX 1.6 crashes on some attention patterns (two SDPAs reading one query,
        # fp32, dynamic batch); the decomposed form builds.
        job = replace(job, decompose_attention=True)
        retry = run_in_child(job, timeout)
        if not retry.crashed:
            notes.append(f"the TensorRT builder crashed ({outcome.crashed}); the engine was rebuilt with "
                         "attention decomposed into matmul/softmax (decompose_attention=True)")
        outcome = retry
    _raise_if_failed(outcome, graph)
    files = [p for p in (job.engine if outcome.engine_bytes else None, job.saved if job.mode == "gpu" else None,
                         job.metadata) if p]
    if job.mode == "aot":
        notes.append("model.engine was built ahead of time without a GPU: it targets " +
                     RTX_TARGET.format(version=outcome.trt_version) +
                     "; it was not run here (tensorrt.json names its bindings and shapes)")
    gap = outcome.max_difference
    if gap is not None and job.precision == "fp32" and not gap <= FP32_TOLERANCE:  # NaN included
        raise bug(f"the TensorRT engine disagrees with eager: max |TensorRT - eager| = {gap:.2e} > "
                  f"{FP32_TOLERANCE:g} (fp32)", _spec_start(graph),
                  hint="this is likely a TensorRT or archspec bug; the files were written anyway")
    if gap is not None and job.precision == "fp16":
        notes.append(f"fp16 engine vs fp32 eager: max |difference| = {gap:.2e}")
    return EngineResult(files, notes, outcome.backend, job.precision, job.batch, outcome.engine_bytes,
                        outcome.build_seconds, gap)


def _raise_if_failed(outcome: Outcome, graph: Graph) -> None:
    """A crash, or an error located at the spec node whose fx node failed to convert."""
    if outcome.crashed:
        raise bug(f"the TensorRT builder crashed ({outcome.crashed}) and made no engine, also with attention "
                  f"decomposed; last output: {outcome.tail or '(none)'}", _spec_start(graph),
                  hint="try --precision fp16 or a static batch (--batch N); this is a TensorRT bug, "
                       "not a problem with the spec")
    if outcome.ok:
        return
    node = outcome.failed_node
    path, loc = node.locate(graph) if node else (None, None)
    op = node.op if node else None
    what = f"{op} did not convert to TensorRT" if op else "TensorRT could not build the engine"
    raise bug(f"{what}: {outcome.error or 'unknown error'}", loc or _spec_start(graph), path,
              hint=HINTS.get(op or "", "torch-tensorrt's coverage check passed but conversion failed; "
                                       "see the message above"))


def _spec_start(graph: Graph) -> Loc | None:
    """The spec file's first line, for an error that belongs to no one node."""
    return Loc(graph.file, 1, 1) if graph.file else None
