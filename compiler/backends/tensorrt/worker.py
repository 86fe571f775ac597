"""The child process that builds one engine: `python -m archspec.compiler.backends.tensorrt.worker JOB.json`.

  * mode "gpu": torch_tensorrt.dynamo.compile(require_full_compilation=True), saved with
    torch_tensorrt.save as model.trt.pt2, plus the raw engine model.engine; the reloaded
    module is run at the min, opt and max batch and compared with the fp32 eager program.
  * mode "aot" (torch-tensorrt-rtx, no GPU): the serialized engine is built ahead of time on
    the CPU, with cuda_stub.plan_only_runtime answering torch-tensorrt's CUDA questions.

Either way it writes tensorrt.json (bindings, shape profile, versions) and reports an
`Outcome` in result.json; an exception becomes a failed Outcome that names the fx node being
converted (failure.py), for the parent to locate in the spec.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

from archspec.core.errors import SpecError

from ..export import max_abs_difference
from .cuda_stub import plan_only_runtime
from .failure import FailedNode
from .job import Job, Outcome
from .runtime import (DTYPES, RTX_TARGET, _settings_kwargs, backend_name, is_rtx, load_torch_tensorrt, quiet,
                      tensorrt_version)


def build(job: Job) -> Outcome:
    """Build the engine `job` asks for and write its files."""
    tt = load_torch_tensorrt()
    program = torch.export.load(job.program)
    settings = _settings_kwargs(tt, job.precision, decompose_attention=job.decompose_attention)
    inputs = [_input(tt, profile) for profile in job.inputs]
    gap = None
    start = time.perf_counter()
    if job.mode == "aot":
        plan = _build_ahead_of_time(tt, program, inputs, job, settings)
        seconds = time.perf_counter() - start
    else:
        program = _to_cuda(program)
        with quiet():
            compiled = tt.dynamo.compile(program, arg_inputs=inputs, **settings)
        seconds = time.perf_counter() - start
        plan = _engine_bytes(compiled)
        tt.save(compiled, job.saved, output_format="exported_program", arg_inputs=inputs)
        gap = _compare_on_gpu(job)
    if plan:
        with open(job.engine, "wb") as f:
            f.write(plan)
    _write_metadata(job, tt, has_engine=bool(plan))
    return Outcome(ok=True, backend=backend_name(tt), trt_version=tensorrt_version(), engine_bytes=len(plan or b""),
                   build_seconds=seconds, max_difference=gap)


def _input(tt, profile: dict):
    """torch_tensorrt.Input for one input's profile (program.input_profiles, through JSON)."""
    shared = profile["dynamic_axes"]
    return tt.Input(min_shape=profile["min"], opt_shape=profile["opt"], max_shape=profile["max"],
                    dtype=getattr(torch, profile["dtype"]), name=profile["name"],
                    **({"shared_dims": dict(shared)} if shared else {}))


def _build_ahead_of_time(tt, program, inputs: list, job: Job, settings: dict) -> bytes:
    names = tuple(p["name"] for p in job.inputs)  # pytrees shaped like forward()'s args and result
    outputs = job.outputs[0] if len(job.outputs) == 1 else tuple(job.outputs)
    with plan_only_runtime(), quiet():
        return tt.dynamo.convert_exported_program_to_serialized_trt_engine(
            program, arg_inputs=inputs, arg_input_binding_names=names, output_binding_names=outputs, **settings)


def _write_metadata(job: Job, tt, has_engine: bool) -> None:
    with open(job.metadata, "w") as f:
        json.dump({
            "spec": job.spec, "backend": backend_name(tt), "precision": job.precision,
            "batch": {"min": job.batch.min, "opt": job.batch.opt, "max": job.batch.max},
            "inputs": list(job.inputs), "outputs": list(job.outputs),
            "engine": os.path.basename(job.engine) if has_engine else None,
            "built": "ahead of time, without a GPU" if job.mode == "aot" else "on a CUDA GPU",
            "targets": (RTX_TARGET.format(version=tensorrt_version()) if is_rtx(tt)
                        else "the GPU architecture it was built on, with the same TensorRT version"),
            "torch_tensorrt_program": None if job.mode == "aot" else os.path.basename(job.saved),
        }, f, indent=2)


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


def _compare_on_gpu(job: Job) -> float:
    """Reload model.trt.pt2 as a user would, run it at the min, opt and max batch, compare
    with the fp32 eager program."""
    reference = _to_cuda(torch.export.load(job.reference)).module()
    loaded = torch.export.load(job.saved).module()
    gaps = []
    generator = torch.Generator().manual_seed(0)
    for b in sorted({job.batch.min, job.batch.opt, job.batch.max}):
        args = []
        for p in job.inputs:
            shape = [b] + p["opt"][1:]
            if p["dtype"] == "int64":
                args.append(torch.randint(0, 2, shape, generator=generator).cuda())
            else:
                args.append(torch.randn(shape, generator=generator).cuda())
        low = [a.to(DTYPES[job.precision]) if a.is_floating_point() else a for a in args]
        with torch.no_grad():
            expected = reference(*args)
            got = loaded(*low)
        got = tuple(g.float() for g in got) if isinstance(got, (tuple, list)) else got.float()
        gaps.append(max_abs_difference(got, expected))
    return float(torch.tensor(gaps).max())  # NaN if any is (max() would hide a later one)


def main(path: str) -> int:
    job = Job.read(path)
    try:
        outcome = build(job)
    except SpecError as exc:
        outcome = Outcome(ok=False, error=exc.message)
    except Exception as exc:  # noqa: BLE001 - reported by the parent, located where possible
        traceback.print_exc()
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        outcome = Outcome(ok=False, error=f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:2000],
                          failed_node=FailedNode.of_exception(exc))
    outcome.write(job.result_file)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
