"""What a target is: one object per backend (eager, torch.compile, torch.export, ONNX, TensorRT,
whatever comes next), found by discovery (targets/__init__.py), carrying everything the
commands ask of it:

    name, doc            the target and one line about it
    commands             which of `build`, `bench`, `check` it serves
    build_precisions     what `build --precision` gives at it; bench_precisions: what `bench` times
    needs                targets whose build runs first (their artifacts are its input)
    availability()       usable here or why not (package missing, no CUDA GPU), the package's version
    precision_problem()  why a precision does not run at it (the text users see)
    steps(), preflight(), build(context)      its part of `archspec build`
    bench(...)           a `Prepared` runner for `archspec bench`
    check(graph, batch)  its coverage report for `archspec check --target`

This module imports no torch: `archspec check` reads the registry to know its `--target`
choices. Target modules import heavy packages inside their methods only.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Callable

from . import PRECISIONS


@dataclass(frozen=True)
class Availability:
    """Whether a target can be used on this machine; when not, why; the versions it runs on."""

    usable: bool
    reason: str | None = None
    version: str | None = None  # "torch 2.14.1", "onnx 1.23.2, onnxruntime 1.32.0"

    def to_json(self) -> dict:
        return {"usable": self.usable, "reason": self.reason, "version": self.version}


def packages_availability(packages: tuple[str, ...], install: str) -> Availability:
    """Usable when every package is installed (found, not imported); the version of each."""
    from importlib.metadata import PackageNotFoundError, version

    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        return Availability(False, f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed "
                                   f"({install})")
    versions = []
    for package in packages:
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:  # importable but not installed as a distribution (a source tree)
            versions.append(package)
    return Availability(True, version=", ".join(versions))


@dataclass
class BuildContext:
    """What a target's build step is given by `archspec build`: the lowered model and the options,
    where to write, the progress lines, and what earlier targets' builds returned (`made`)."""

    model: object  # the torch.fx GraphModule, in eval mode
    graph: object  # the checked IR
    outdir: str  # the staging folder
    precision: str
    batch: object  # BatchRange
    size: str | None  # --size MIN:MAX as given
    image_sizes: Callable[[], object]  # --size as the export's SizeRange (None without --size)
    model_at_size: Callable[[int], object]  # the spec built at another image side, the weights loaded (or None)
    progress: object
    written: list[str]
    made: dict[str, object] = field(default_factory=dict)  # target name -> what its build returned
    notes: list[str] = field(default_factory=list)  # printed as "note: ..." after the step
    plain_onnx: bool = False  # --plain-onnx: the onnx target writes the opset 18 export, not the optimised one
    calibration: str | None = None  # --calibration: int8 static quantization on `random` or a folder of images
    device: str = "cpu"  # --device: where the artifact runs ("cuda": one of build_devices)

    def path(self, name: str) -> str:
        return os.path.join(self.outdir, name)

    def write_text(self, name: str, text: str) -> None:
        path = self.path(name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self.written.append(path)


class Target:
    """One backend. Subclasses set the class attributes and override the methods of the
    commands they serve; `register(MyTarget())` in the module makes it known."""

    name: str = ""
    doc: str = ""  # one line: what it is
    artifacts: str = ""  # one line for `build --help`: what a build at it writes
    commands: tuple[str, ...] = ()
    build_precisions: tuple[str, ...] = ()
    bench_precisions: tuple[str, ...] = ()
    build_devices: tuple[str, ...] = ("cpu",)  # `build --device`: what its artifacts can be built to run on
    precision_docs: dict[str, str] = {}  # build precision -> what it gives, for `build --help`
    not_built: dict[str, str] = {}  # build precision -> why it is not built yet (runs elsewhere)
    needs: tuple[str, ...] = ()  # targets whose build runs before this one's
    default_for: tuple[str, ...] = ()  # commands whose --target defaults to it
    runs_model: bool = True  # its build runs the model (export traces it): a forward's memory is needed
    # its build's run holds attention score matrices whole (heads x queries x keys at the example
    # batch: archspec/budget.py counts them), where PyTorch's fused CPU attention streams them
    materializes_scores: bool = False
    dynamic_sizes: bool = False  # its build takes --size MIN:MAX
    is_reference: bool = False  # fp32 on the CPU at it is what bench measures the others against
    order: int = 100  # where it is listed (the built-ins 10 to 50)
    packages: tuple[str, ...] = ("torch",)
    install: str = "pip install torch"

    def __repr__(self) -> str:
        return f"<target {self.name}>"

    def serves(self, command: str) -> bool:
        return command in self.commands

    def availability(self) -> Availability:
        return packages_availability(self.packages, self.install)

    # -- precisions ----------------------------------------------------------------------------
    def precision_reason(self, precision: str, device: str = "cpu") -> str | None:
        """Why `precision` cannot run at this target on `device`, or None when it can."""
        if precision not in PRECISIONS:
            return f"unknown precision {precision!r} (fp32, bf16, fp16 or int8)"
        if precision == "fp32":
            return None
        return self.precision_problem(precision, device)

    def precision_problem(self, precision: str, device: str) -> str | None:
        """A lower precision (not fp32) at this target: why it cannot run, or None."""
        offered = self.build_precisions + tuple(p for p in self.bench_precisions if p not in self.build_precisions)
        return None if precision in offered else f"--target {self.name} gives {' or '.join(offered)}"

    def precision_title(self, precision: str) -> str:
        """The build's progress line for the step that gives `precision` (apply_precision)."""
        return f"cast to {precision}, measure the deviation from fp32"

    def build_problem(self, precision: str, device: str = "cpu") -> str | None:
        """Why `archspec build` cannot give `precision` at this target on `device` (None when it can)."""
        from . import giving

        if precision in self.build_precisions:
            return self.precision_reason(precision, device)
        return (self.not_built.get(precision) or self.precision_reason(precision, device)
                or f"{precision} builds go with --target {' or '.join(giving(precision))}")

    def apply_precision(self, model, graph, request):
        """The artifact in `request.precision` and its deviation from fp32 (a PrecisionResult);
        called by precision.apply_precision once the precision is known to fit."""
        raise NotImplementedError(f"--target {self.name} has no lower precisions")

    # -- build ---------------------------------------------------------------------------------
    def steps(self, precision: str) -> int:
        """The progress lines this target's build adds."""
        return 0

    def preflight(self) -> None:
        """Before any work: raise what a user must fix first (a package to install)."""

    def build(self, context: BuildContext):
        """Write this target's artifacts; what it returns goes to later targets (context.made)."""
        raise NotImplementedError(f"--target {self.name} does not build")

    # -- bench and check ---------------------------------------------------------------------------
    def bench(self, model, graph, precision: str, *, workdir: str, threads: int, device: str):
        """A bench.Prepared runner; raise bench.Unavailable when it cannot run here."""
        raise NotImplementedError(f"--target {self.name} is not benched")

    def check(self, graph, batch=None):
        """The coverage report of `archspec check --target` (complete, summary(), diagnostics(),
        to_json())."""
        raise NotImplementedError(f"--target {self.name} has no check")


class ModuleTarget(Target):
    """A target that runs the torch module itself (eager, torch.compile, torch.export): it casts
    to bf16 or fp16 as torch does on the device, and is benched as a module."""

    compiled: bool = False  # bench and measure it through torch.compile
    compile_mode: str | None = None  # torch.compile's mode when compiled ("reduce-overhead": CUDA graphs)

    def precision_problem(self, precision: str, device: str) -> str | None:
        from . import giving

        if precision == "int8":
            return ("int8 is ONNX Runtime's dynamic quantization of the linear layers: use --target "
                    + " or ".join(giving("int8")))
        if precision == "fp16" and not device.startswith("cuda"):
            return "fp16 runs on CUDA; on a CPU use bf16 (AVX512-BF16 / AMX)"
        if precision == "bf16" and device == "cpu":
            from ..precision import cpu_has_bf16

            if not cpu_has_bf16():
                return "this CPU has no bf16 instructions (AVX512-BF16 or AMX): bf16 would be emulated and slow"
        return None

    def apply_precision(self, model, graph, request):
        from ..precision import cast_precision

        return cast_precision(model, graph, request, compiled=self.compiled)

    def bench(self, model, graph, precision: str, *, workdir: str, threads: int, device: str):
        from ..bench import torch_runner

        return torch_runner(model, graph, precision, compiled=self.compiled, device=device, mode=self.compile_mode)
