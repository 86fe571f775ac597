"""`archspec build`: check, lower, load weights, export, and write the artifacts, showing
progress as it goes.

Writes into OUTDIR (default build/<name>/):
  report.json   the check report (shapes, params, FLOPs per node)
  model.py      standalone readable source of the module (needs only torch)
  weights.pt    its state dict (torch.load(..., weights_only=True))
  model.pt2     torch.export program, dynamic batch           (--target export, onnx, tensorrt)
  model.onnx    ONNX, opset 18, dynamic batch                 (--target onnx)
  model.engine  serialized TensorRT engine                    (--target tensorrt)
  tensorrt.json the engine's bindings, shape profile, versions (--target tensorrt)
  model.trt.pt2 torch-tensorrt program, on a CUDA machine      (--target tensorrt)
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch

from archspec.diagnostics import SpecError, error

from ..lower import locate, lower
from ..pipeline import check_spec
from .export import EXAMPLE_BATCH, example_inputs, export_program, max_abs_difference, other_lengths
from .source import standalone_source


@dataclass
class Progress:
    """One line per step on stderr: what it did and how long it took."""

    total: int
    stream: object = field(default_factory=lambda: sys.stderr)
    step: int = 0

    graph: object = None  # the IR, once checked: failures are located at its nodes

    def run(self, title: str, fn, describe=lambda result: ""):
        self.step += 1
        print(f"[{self.step}/{self.total}] {title} ...", end="", file=self.stream, flush=True)
        start = time.perf_counter()
        try:
            result = fn()
        except SpecError:
            print(" failed", file=self.stream, flush=True)
            raise
        except Exception as exc:  # a backend failure: located at the node it happened in
            print(" failed", file=self.stream, flush=True)
            raise located_failure(exc, self.graph, title) from exc
        detail = describe(result)
        print(f" {time.perf_counter() - start:.1f} s{'  ' + detail if detail else ''}", file=self.stream, flush=True)
        return result


def located_failure(exc: Exception, graph, step: str) -> SpecError:
    """A failure inside lowering or a backend, reported at the spec node it happened in.

    The traceback repeats the spec frames lowering writes on fx nodes; lower.locate reads
    them. Such a failure is a bug (in archspec or torch), not a problem with the spec: the
    CLI exits with 3 and says so.
    """
    text = f"{exc}\n" + "".join(traceback.format_exception(exc))
    first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    path, loc = locate(graph, text) if graph is not None else (None, None)
    message = f"{step} failed: {type(exc).__name__}: {first[:300]}"
    failure = error(message, loc, path,
                    hint="the spec passed the checker, so this is a bug in archspec or torch; "
                         "set ARCHSPEC_DEBUG=1 for the full traceback")
    failure.is_bug = True
    return failure


def parse_batch(text: str | None) -> tuple[int, int, int]:
    """'8' -> (8, 8, 8); '1:8:64' -> (1, 8, 64); None -> (1, 8, 64)."""
    if text is None:
        return (1, 8, 64)
    parts = text.split(":")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"--batch takes N or MIN:OPT:MAX, got {text!r}") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or not 1 <= values[0] <= values[1] <= values[2]:
        raise ValueError(f"--batch takes N or MIN:OPT:MAX with 1 <= MIN <= OPT <= MAX, got {text!r}")
    return tuple(values)  # type: ignore[return-value]


def _size(path: str) -> str:
    n = os.path.getsize(path)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def build_command(spec, overrides, out=None, target="export", seed=0, weights=None, precision="fp32",
                  batch=None, as_json=False) -> int:
    from archspec.cli import UsageError

    try:
        batch_range = parse_batch(batch)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if target == "tensorrt":
        from .tensorrt import STEPS as tensorrt_steps, load_torch_tensorrt

        load_torch_tensorrt()  # say what to install before any work
    else:
        tensorrt_steps = 0
    steps = {"eager": 3, "export": 4, "onnx": 5, "tensorrt": 4 + tensorrt_steps}[target] + (1 if weights else 0)
    progress = Progress(steps)
    report = progress.run(f"check {spec}", lambda: check_spec(spec, overrides),
                          lambda r: f"{r.params:,} params, {r.flops / 1e9:.2f} GFLOPs per sample")
    graph = progress.graph = report.graph
    gm = progress.run("lower to torch.fx", lambda: lower(graph, seed=seed),
                      lambda m: f"{len(m.graph.nodes)} fx nodes, seed {seed}")
    if weights:
        from ..weights import load_weights

        progress.run(f"load weights {weights}", lambda: load_weights(gm, weights, graph),
                     lambda r: r.summary())
    gm.eval()
    outdir = out or os.path.join("build", report.name)
    os.makedirs(outdir, exist_ok=True)
    written = []

    def write_sources():
        for name, text in (("report.json", json.dumps(report.to_json(), indent=2)),
                           ("model.py", standalone_source(gm, report.name, report.file))):
            path = os.path.join(outdir, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            written.append(path)
        path = os.path.join(outdir, "weights.pt")
        torch.save(gm.state_dict(), path)
        written.append(path)

    progress.run(f"write report.json, model.py, weights.pt to {outdir}", write_sources)
    exported = None
    if target != "eager":
        def export():
            program = export_program(gm, graph, _export_range(batch_range))
            path = os.path.join(outdir, "model.pt2")
            torch.export.save(program, path)
            written.append(path)
            return program

        exported = progress.run("torch.export (dynamic batch) -> model.pt2", export,
                                lambda p: f"max |export - eager| {_export_gap(p, gm, graph, batch_range):.2e}")
    if target == "onnx":
        from .onnx import export_onnx

        path = os.path.join(outdir, "model.onnx")
        progress.run("ONNX (opset 18, dynamic batch) -> model.onnx", lambda: export_onnx(gm, graph, path),
                     lambda r: r.summary())
        written.append(path)
    if target == "tensorrt":
        from .tensorrt import build_engine

        reuse = exported if _export_range(batch_range) == (batch_range[0], batch_range[2]) else None
        result = build_engine(gm, graph, outdir, precision, batch_range, program=reuse, progress=progress)
        written.extend(result.files)
        for line in result.notes:
            print(f"note: {line}", file=sys.stderr)
    if as_json:
        print(json.dumps({"outdir": outdir, "files": {os.path.basename(p): os.path.getsize(p) for p in written}},
                         indent=2))
    else:
        print(f"wrote {outdir}/: " + ", ".join(f"{os.path.basename(p)} ({_size(p)})" for p in written))
    return 0


def _export_range(batch_range) -> tuple[int, int] | None:
    """model.pt2's batch range: the --batch range when it is one torch.export can trace
    (a real range holding the example batch); else the spec's own dynamic batch."""
    lo, _, hi = batch_range
    return (lo, hi) if lo < hi and lo <= EXAMPLE_BATCH <= hi else None


def _export_gap(program, gm, graph, batch_range) -> float:
    """Run the exported program at another batch size (and lengths) than it was traced with, against eager."""
    lo, hi = _export_range(batch_range) or (graph.dims["B"].lo, graph.dims["B"].hi)
    batch = EXAMPLE_BATCH + 1 if EXAMPLE_BATCH + 1 <= hi else lo
    args = example_inputs(graph, batch=batch, lengths=other_lengths(graph))
    with torch.no_grad():
        return max_abs_difference(program.module()(*args), gm(*args))

