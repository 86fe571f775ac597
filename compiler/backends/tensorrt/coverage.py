"""The coverage check: does every op of a spec's exported graph convert to TensorRT?

`check_coverage` lowers the exported program exactly as torch-tensorrt does before it converts
(its pre-export passes, its decompositions, its post-lowering passes) and asks torch-tensorrt's
own partitioner, node by node, whether the op converts. Nothing may fall back to PyTorch:
every op that would is a located diagnostic (archspec node path and spec file:line, read from
the fx node's stack trace and module stack), and building stops.

Those passes and the partitioner's converter registry are private to torch-tensorrt; they
are reached only through `ConverterRegistry`, which names the torch-tensorrt versions it was
written for and fails with a clear message when an installed version lacks them.
`coverage_report` is `archspec check SPEC --target tensorrt`; `CoverageReport` its result.
For a decoder-only spec that generates, it also checks the two decode programs `build` ships
(compiler/backends/decode_step.py): the prefill and the single-token decode step, the KV cache
as inputs and outputs, batch and prompt or cache length dynamic; their fallbacks are located at
the spec as the model's are.
"""

from __future__ import annotations

import importlib
import operator
import time
from collections import Counter
from dataclasses import dataclass, field, fields

import torch

from archspec.core.errors import Diagnostic, Loc, SpecError, UsageError, error
from archspec.core.ir import Graph

from ...hierarchy import copy_model
from ...lower import locate, lower, module_paths_of
from ..batch import BatchRange
from ..decode_step import has_decode_step
from ..export import with_spec_frames
from .cuda_stub import no_gpu_answers
from .program import export_for_tensorrt
from .runtime import (DTYPES, INSTALL_HINT, _settings_kwargs, backend_name, load_torch_tensorrt, quiet,
                      torch_tensorrt_version)

# Where torch-tensorrt's registry says an op converts but its converter cannot do it
# (torch-tensorrt 2.14): (aten op, test on the fx node, why).
_KNOWN_FAILURES = [
    ("aten.repeat.default", lambda node: any(isinstance(a, torch.fx.Node) for a in node.args[1]),
     "repeat by a symbolic size (the batch) does not convert"),
]
DECODE_BATCH = BatchRange(1, 2, 1024)  # the decode programs' batch (generate.step: traced at 2, dynamic to 1024)
DECODE_PROGRAMS = {"prefill": ("prefill.pt2", "prompt length"),  # name: (the file build ships, its dynamic length)
                   "decode step": ("decode_step.pt2", "cache length")}
WRAPPED = "model."  # the model's attribute in the decode programs' module (generate.step.DecodeStep)
HINTS = {  # what to write in the primitive's module instead
    "aten.gather.default": "gather has no dynamic-shape converter; use index_select or x[index], "
                           "or build for a static batch (--batch N)",
    "aten.repeat.default": "broadcast with expand(batch, ...) instead of repeat (as compiler/modules/attention/window.py "
                           "does for the shift mask)",
}


# -- torch-tensorrt's private API ------------------------------------------------------------------


class ConverterRegistry:
    """torch-tensorrt's lowering passes and its partitioner's converter registry, the private
    API the coverage check reads, behind one object.

    Made from an imported torch_tensorrt: it finds each private name (module and attribute,
    the registry's `set_compilation_settings`, the partitioner's `is_node_supported`, the
    settings fields the decompositions read) and, if one is missing, fails at once with a
    message naming the installed torch-tensorrt and the versions this was written for."""

    WRITTEN_FOR = ("2.14",)  # torch-tensorrt major.minor versions whose private API this reads
    _NAMES = {  # attribute here: (module, name in it)
        "_pre_export_lowering": ("torch_tensorrt.dynamo.lowering", "pre_export_lowering"),
        "_get_decompositions": ("torch_tensorrt.dynamo.lowering", "get_decompositions"),
        "_post_lowering": ("torch_tensorrt.dynamo.lowering", "post_lowering"),
        "_converters": ("torch_tensorrt.dynamo.conversion._ConverterRegistry", "DYNAMO_CONVERTERS"),
        "_operator_support": ("torch_tensorrt.dynamo.partitioning._global_partitioner",
                              "TorchTensorRTOperatorSupport"),
    }
    _METHODS = (("_converters", "set_compilation_settings"), ("_operator_support", "is_node_supported"))
    _SETTINGS_READ = ("enable_experimental_decompositions", "decompose_attention", "use_distributed_mode_trace",
                      "use_fp32_acc", "torch_executed_ops")

    def __init__(self, tt):
        self.version = torch_tensorrt_version(tt)
        for attribute, (module, name) in self._NAMES.items():
            setattr(self, attribute, self._find(module, name))
        for attribute, method in self._METHODS:
            if not hasattr(getattr(self, attribute), method):
                raise self._missing(f"{self._NAMES[attribute][1]}.{method}")
        known = {f.name for f in fields(tt.dynamo.CompilationSettings)}
        for name in self._SETTINGS_READ:
            if name not in known:
                raise self._missing(f"CompilationSettings.{name}")

    @property
    def written_for_this_version(self) -> bool:
        return ".".join(self.version.split(".")[:2]) in self.WRITTEN_FOR

    def _find(self, module: str, name: str):
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            raise self._missing(f"{module}.{name}") from None

    def _missing(self, what: str) -> SpecError:
        versions = ", ".join(self.WRITTEN_FOR)
        message = (f"torch-tensorrt {self.version} has no {what}: the TensorRT coverage check reads "
                   f"torch-tensorrt's private converter registry, written for torch-tensorrt {versions}")
        if self.written_for_this_version:
            return error(message, hint=f"the install looks broken; reinstall with {INSTALL_HINT}")
        return error(message, hint=f"install torch-tensorrt {self.WRITTEN_FOR[-1]}: pip install "
                                   f"'archspec-compiler[tensorrt-rtx]' or 'torch-tensorrt=={self.WRITTEN_FOR[-1]}.*'")

    def lower(self, program: torch.export.ExportedProgram, settings) -> torch.fx.GraphModule:
        """What torch-tensorrt's compile does to a program before it partitions and converts
        (its pre-export passes edit the program's graph in place; they keep its meaning)."""
        program = self._pre_export_lowering(program, settings)
        program = program.run_decompositions(self._get_decompositions(
            settings.enable_experimental_decompositions, settings.decompose_attention,
            settings.use_distributed_mode_trace, use_fp32_acc=settings.use_fp32_acc))
        return self._post_lowering(program.module(), settings)

    def operator_support(self, settings):
        """The partitioner's per-node question, `is_node_supported(modules, node)`, asked of the
        registry under `settings`."""
        self._converters.set_compilation_settings(settings)  # as torch-tensorrt's compile does
        return self._operator_support(torch_executed_ops=settings.torch_executed_ops)


# -- the report ------------------------------------------------------------------------------------


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
    program: str = "model"  # or one of the decode programs: "prefill", "decode step"
    parts: list[CoverageReport] = field(default_factory=list)  # a generating spec's decode programs

    @property
    def converts_whole(self) -> bool:
        """Nothing of this program falls back (its decode programs aside)."""
        return not self.fallbacks

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def converted(self) -> int:
        return self.total - len(self.fallbacks)

    @property
    def complete(self) -> bool:
        """Nothing falls back, in the model nor in its decode programs."""
        return self.converts_whole and all(part.complete for part in self.parts)

    def headline(self) -> str:
        share = 100.0 * self.converted / self.total if self.total else 100.0
        text = f"{self.converted} of {self.total} ops convert ({share:.{0 if self.converts_whole else 1}f}%)"
        if self.converts_whole:
            return text + ", nothing falls back to PyTorch"
        return text + f"; {len(self.fallbacks)} would fall back to PyTorch"

    def summary(self) -> str:
        lines = [f"TensorRT coverage ({self.backend}; {self.precision}, {self.batch.describe()}): {self.headline()}"]
        lines += self._fallback_lines("  ")
        for part in self.parts:
            length = DECODE_PROGRAMS[part.program][1]
            lines.append(f"  {part.program} ({part.batch.describe()}, {length} dynamic): {part.headline()}")
            lines += part._fallback_lines("    ")
        return "\n".join(lines)

    def _fallback_lines(self, indent: str) -> list[str]:
        lines = []
        for (op, path, loc, reason), count in self._groups().items():
            where = f"{loc}: " if loc else ""
            lines.append(f"{indent}{where}{path or '<no archspec node>'}: {op} x{count}: {reason}")
        return lines

    def _groups(self) -> Counter:
        return Counter((f.op, f.path, f.loc, f.reason) for f in self.fallbacks)

    def diagnostics(self) -> list[Diagnostic]:
        out = []
        program = "" if self.program == "model" else f" in the {self.program} ({DECODE_PROGRAMS[self.program][0]})"
        for (op, path, loc, reason), count in self._groups().items():
            times = f" ({count} times)" if count > 1 else ""
            out.append(Diagnostic(
                f"{op} does not convert to TensorRT{program}{times}: {reason}, and nothing may fall back to PyTorch "
                f"({self.precision}, {self.batch.describe()})",
                loc or (Loc(self.file, 1, 1) if self.file else None), path,
                HINTS.get(op, "write the primitive's module with ops that TensorRT converts, or build "
                              "--target onnx")))
        return out + [d for part in self.parts for d in part.diagnostics()]

    def to_json(self) -> dict:
        return {"backend": self.backend, "precision": self.precision,
                "batch": {"min": self.batch.min, "opt": self.batch.opt, "max": self.batch.max},
                "complete": self.complete, "ops": self.total, "converted": self.converted,
                "op_counts": dict(sorted(self.ops.items())),
                "fallbacks": [f.record() for f in self.fallbacks],
                **({"decode_programs": {p.program.replace(" ", "_"): p.to_json() for p in self.parts}}
                   if self.parts else {})}

    def raise_if_incomplete(self) -> None:
        if not self.complete:
            raise SpecError(self.diagnostics())


# -- the check -------------------------------------------------------------------------------------


def op_name(target) -> str:
    """'aten.gather.default' for an aten overload; else the callable's name."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def check_coverage(program: torch.export.ExportedProgram, graph: Graph, precision: str = "fp32",
                   batch=None) -> CoverageReport:
    """Lower `program` as torch-tensorrt does before converting and ask its partitioner about
    every op. (torch-tensorrt's pre-export passes edit the program's graph in place; they keep
    its meaning.)"""
    batch = BatchRange.of(batch)
    tt = load_torch_tensorrt()
    start = time.perf_counter()
    registry = ConverterRegistry(tt)
    with no_gpu_answers(), quiet():
        settings = tt.dynamo.CompilationSettings(**_settings_kwargs(tt, precision))
        gm = registry.lower(program, settings)
        support = registry.operator_support(settings)
        modules = dict(gm.named_modules())
        report = CoverageReport(graph.name, graph.file, backend_name(tt), precision, batch)
        for node in gm.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            op = op_name(node.target)
            report.ops[op] += 1
            reason = _fallback_reason(support.is_node_supported(modules, node), op, node, batch)
            if reason:
                path, loc = locate(graph, node.meta.get("stack_trace"), module_paths_of(node))
                report.fallbacks.append(Fallback(op, node.name, path, loc, reason))
    report.seconds = time.perf_counter() - start
    return report


def _fallback_reason(supported: bool, op: str, node: torch.fx.Node, batch: BatchRange) -> str | None:
    """Why `node` would fall back to PyTorch, or None if it converts."""
    if not supported:
        return "torch-tensorrt has no converter for it" + ("" if batch.static else " with a dynamic batch")
    for name, test, why in _KNOWN_FAILURES:
        if op == name and test(node):
            return why
    return None


def coverage_report(graph: Graph, batch=None, precision: str = "fp32", seed: int = 0) -> CoverageReport:
    """`archspec check SPEC --target tensorrt`: lower the checked spec, export it for the batch
    (None: 1:8:64, 'N' or 'MIN:OPT:MAX') and check that every op converts. Builds nothing."""
    try:
        batch = BatchRange.of(batch)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    load_torch_tensorrt()  # the install hint before any work
    model = lower(graph, seed=seed)
    program = export_for_tensorrt(model, graph, precision, batch)
    report = check_coverage(program, graph, precision, batch)
    if has_decode_step(graph):
        report.parts = decode_program_coverage(model, graph, precision)
    return report


def decode_program_coverage(model, graph: Graph, precision: str = "fp32") -> list[CoverageReport]:
    """The coverage of the prefill and the decode step of a spec that generates, exported as
    build exports them (batch DECODE_BATCH, prompt or cache length dynamic), in `precision`."""
    from ...generate.step import export_decode_step, export_prefill

    if precision != "fp32":
        model = copy_model(model).to(DTYPES[precision])
    reports = []
    for name, export in zip(DECODE_PROGRAMS, (export_prefill, export_decode_step)):
        with quiet():
            program = with_spec_frames(at_model_paths(export(model)), graph)
        report = check_coverage(program, graph, precision, DECODE_BATCH)
        report.program = name
        reports.append(report)
    return reports


def at_model_paths(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """The decode programs wrap the model as `model` (generate.step.DecodeStep): drop that
    prefix from the module stack torch.export kept, so that its paths are the spec's nodes."""
    for node in program.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            node.meta["nn_module_stack"] = {key: (_without_model(path), kind) for key, (path, kind) in stack.items()}
    return program


def _without_model(path: str) -> str:
    return path[len(WRAPPED):] if path.startswith(WRAPPED) else path
