"""The process boundary of an engine build: what the parent asks of the child (`Job`), what
comes back (`Outcome`), and running one job in a child process (`run_in_child`).

The engine is built in a child process so that a crash of the TensorRT builder becomes an
archspec error, not a dead `archspec`. Both records cross the boundary as JSON (job.json and
result.json in the job's work folder); the child is `python -m` worker.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass

from archspec.core.errors import error

from ..batch import BatchRange
from .failure import FailedNode

WORKER = "archspec.compiler.backends.tensorrt.worker"


@dataclass(frozen=True)
class Job:
    """One engine build. mode "gpu": compile, save, reload and compare on a CUDA GPU; mode "aot":
    a serialized engine built ahead of time on the CPU (torch-tensorrt-rtx)."""

    mode: str
    program: str  # the program to convert (torch.export.save), in the engine's precision
    precision: str
    work: str  # a folder for job.json, result.json and the programs; removed by the parent
    batch: BatchRange
    inputs: tuple[dict, ...]  # per input: name, dtype, min/opt/max shapes, dynamic_axes (program.input_profiles)
    outputs: tuple[str, ...]
    engine: str  # where to write model.engine
    saved: str  # where to write model.trt.pt2 (mode "gpu")
    metadata: str  # where to write tensorrt.json
    spec: dict  # {"name", "file"} of the spec
    decompose_attention: bool = False
    reference: str | None = None  # the fp32 program to compare with (mode "gpu")

    @property
    def job_file(self) -> str:
        return os.path.join(self.work, "job.json")

    @property
    def result_file(self) -> str:
        return os.path.join(self.work, "result.json")

    def to_json(self) -> dict:
        return {**asdict(self), "batch": [self.batch.min, self.batch.opt, self.batch.max],
                "inputs": list(self.inputs), "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, record: dict) -> "Job":
        inputs = tuple({**p, "dynamic_axes": {int(axis): name for axis, name in p["dynamic_axes"].items()}}
                       for p in record["inputs"])  # (JSON keys are strings)
        return cls(**{**record, "batch": BatchRange(*record["batch"]), "inputs": inputs,
                      "outputs": tuple(record["outputs"])})

    def write(self) -> None:
        with open(self.job_file, "w") as f:
            json.dump(self.to_json(), f)

    @classmethod
    def read(cls, path: str) -> "Job":
        with open(path) as f:
            return cls.from_json(json.load(f))


@dataclass(frozen=True)
class Outcome:
    """What came of a job: an engine (ok), an error the child caught (with the fx node it failed
    at, where known), or a child that died of a signal (crashed)."""

    ok: bool
    backend: str | None = None
    trt_version: str | None = None
    engine_bytes: int = 0
    build_seconds: float = 0.0
    max_difference: float | None = None  # reloaded engine vs eager (mode "gpu")
    error: str | None = None
    failed_node: FailedNode | None = None
    crashed: str | None = None  # the signal's name
    tail: str = ""  # the child's last lines on stderr

    def to_json(self) -> dict:
        return {**asdict(self), "failed_node": self.failed_node.to_json() if self.failed_node else None}

    @classmethod
    def from_json(cls, record: dict) -> "Outcome":
        node = record["failed_node"]
        return cls(**{**record, "failed_node": FailedNode.from_json(node) if node else None})

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f)

    @classmethod
    def read(cls, path: str) -> "Outcome":
        with open(path) as f:
            return cls.from_json(json.load(f))


def run_in_child(job: Job, timeout: float | None) -> Outcome:
    """Run worker.py on `job` in a child process and read what it reports."""
    job.write()
    if os.path.exists(job.result_file):
        os.remove(job.result_file)
    try:
        proc = subprocess.run([sys.executable, "-m", WORKER, job.job_file], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise error(f"the TensorRT engine build took longer than {timeout:.0f} s and was stopped") from None
    tail = " | ".join(line.strip() for line in (proc.stderr or "").strip().splitlines()[-3:])
    if proc.returncode < 0:
        return Outcome(ok=False, crashed=_signal_name(-proc.returncode), tail=tail)
    if not os.path.exists(job.result_file):
        return Outcome(ok=False, error=f"the build process exited with status {proc.returncode}: {tail}")
    return Outcome.read(job.result_file)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
