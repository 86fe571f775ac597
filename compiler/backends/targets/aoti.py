"""aoti: an AOTInductor package (model.aoti.pt2) compiled from the torch.export program by
`torch._inductor.aoti_compile_and_package`: the model as C++ and kernels in one file that
plain torch loads (`torch._inductor.aoti_load_package`), no archspec needed. Dynamic batch
as the export has it; fp32, or bf16 (the package takes and gives fp32, computes in bf16).

`--device cuda` compiles it for this machine's GPU instead (it then takes its inputs there).
On the CPU the package's program is exported with short attention rows written out for
inductor to fuse (compiler/modules/attention/form.py), so it is not model.pt2's program.

The build loads the package it wrote in a fresh Python process that refuses archspec's imports
(so a crash inside torch's loader is an error, not the end of archspec, and the package is seen
to need plain torch only), runs it there and compares it with the eager module at two batch sizes
(aoti.json keeps the gaps, the batch range, the compile time and the thread count its kernels
were compiled for); a bf16 build's deviation from fp32 goes to precision.json as for the other
precisions. Compiling needs a C++ compiler (the one inductor uses: $CXX, else g++) and takes
tens of seconds for a small model, minutes for a full-size one on a few cores.

    archspec build specs/vit_ti16.yaml --target aoti
    python -c "import torch; m = torch._inductor.aoti_load_package('build/vit_ti16/model.aoti.pt2'); ..."
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import time

from . import giving, register
from .base import Availability, Target, packages_availability

PACKAGE = "model.aoti.pt2"
NO_COMPILER = "AOTInductor compiles C++ and finds no C++ compiler here (it looks for {names})"
COMPILER_HINT = "install one (apt-get install g++), or name the one to use in $CXX"
BF16_NO = "this CPU has no bf16 instructions (AVX512-BF16 or AMX): bf16 would be emulated and slow"
SLOW = "compiles C++, minutes for a full-size model on a few cores"
DEVIATION_SAMPLES = 32  # random inputs a bf16 package's top-1 agreement is measured on
FRESH_SECONDS = 900  # the most the fresh process may take to load the package and run its checks

# Run by a fresh interpreter (sys.executable -c FRESH_RUN PACKAGE INPUTS OUTPUTS DEVICE THREADS):
# the package loaded by plain torch with archspec refused, run on each saved tuple of inputs
# (moved to DEVICE), its outputs saved back on the CPU.
FRESH_RUN = textwrap.dedent("""
    import sys

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "archspec":
                raise ImportError(f"the package needs {name}: it must load with plain torch")
            return None

    sys.meta_path.insert(0, Refuse())
    import torch

    package, inputs, outputs, device, threads = sys.argv[1:6]
    torch.set_num_threads(int(threads))
    model = torch._inductor.aoti_load_package(package)
    results = []
    with torch.no_grad():
        for args in torch.load(inputs, weights_only=True):
            out = model(*(a.to(device) for a in args))
            results.append(tuple(o.cpu() for o in (out if isinstance(out, (list, tuple)) else [out])))
    torch.save(results, outputs)
""")


def compiler_names() -> list[str]:
    """The C++ compilers inductor tries, in its order (its config: $CXX, else g++; clang++ on macOS)."""
    from torch._inductor import config

    search = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    return [name for name in search if name]  # None: a conda download inductor does only when asked


def cpp_compiler() -> str | None:
    """The path of the first C++ compiler inductor would use, or None when none is found."""
    for name in compiler_names():
        found = shutil.which(name)
        if found:
            return found
    return None


def low_precision_inside(model, precision: str):
    """What a bf16 package is compiled from (or an fp16 one, which bench_vs_peers.py --device cuda
    asks for): a copy of `model` in that precision that takes fp32 inputs (cast on the way in)
    and gives fp32 outputs, so that callers feed it as the fp32 one."""
    import torch

    from ..precision import DTYPES, cast_model

    dtype = DTYPES[precision]

    class LowPrecisionInside(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            out = self.inner(*(a.to(dtype) if a.is_floating_point() else a for a in args))
            return out.float() if isinstance(out, torch.Tensor) else tuple(o.float() for o in out)

    return LowPrecisionInside(cast_model(model, precision)).eval()


def batch_range_of(graph, batch=None) -> tuple[int, int]:
    """The batch sizes the package takes: the build's range when torch.export can trace it, else
    the spec's own."""
    from ..export import export_range

    span = export_range(batch) if batch is not None else None
    return span or (graph.dims["B"].lo, graph.dims["B"].hi)


def export_for_package(model, graph, precision: str, batch_range: tuple[int, int], device: str = "cpu"):
    """The torch.export program a package is compiled from (fp32 inputs and outputs, dynamic
    batch over `batch_range`), on `device`. On the CPU short attention rows are written out for
    inductor to fuse (compiler/modules/attention/form.py); on a GPU they stay SDPA's kernels."""
    import contextlib

    import torch

    from ...modules.attention.form import attention_written_out
    from ..export import dynamic_shapes, example_inputs

    module = model if precision == "fp32" else low_precision_inside(model, precision)
    if device != "cpu":  # a copy on the GPU: the caller's model stays where it is
        from ...hierarchy import copy_model

        module = copy_model(module) if module is model else module
        module = module.to(device)
    module = module.eval()
    args = tuple(a.to(device) for a in example_inputs(graph))
    shapes = dynamic_shapes(graph, batch_range)
    positional = tuple(shapes[node.name] for node in graph.inputs())
    if precision != "fp32":  # forward(*args): the shapes go under its one parameter's name
        positional = {"args": positional}
    written = attention_written_out(module) if device == "cpu" else contextlib.nullcontext()
    with torch.no_grad(), written:
        return torch.export.export(module, args, dynamic_shapes=positional, strict=False)


def compile_package(program, path: str) -> str:
    """`program` compiled by AOTInductor into the package at `path` (a .pt2 file), frozen
    (compiler/inductor/frozen.py); a failing C++ compiler is an error in its own words."""
    from torch._inductor import exc

    from archspec.core.errors import error

    from ...inductor.frozen import compile_frozen

    try:
        return compile_frozen(program, path)
    except Exception as failure:  # noqa: BLE001 - only the compiler's own failures are turned into an error here
        compiler_failure = cpp_failure(failure, (exc.CppCompileError, exc.InvalidCxxCompiler))
        if compiler_failure is None:
            raise
        raise error(f"AOTInductor's C++ compile failed: {compiler_failure}",
                    hint=f"check the C++ compiler ({cpp_compiler() or 'none found'}) and its headers") from None


def cpp_failure(failure: BaseException, kinds: tuple) -> str | None:
    """The compiler's first words when `failure` (or what it wraps) is the C++ compiler failing:
    the first line of its output, else of the error; None when it is something else."""
    seen = failure
    while seen is not None and not isinstance(seen, kinds):
        seen = getattr(seen, "inner_exception", None) or seen.__cause__
    if seen is None:
        return None
    text = str(seen)
    output = text.split("Output:", 1)[1] if "Output:" in text else text
    first = next((line.strip() for line in output.splitlines() if line.strip()), type(seen).__name__)
    return first[:300]


def load_package(path: str):
    """The compiled model from a package: a callable taking the inputs, giving a tensor or a list."""
    import torch

    return torch._inductor.aoti_load_package(path)


def run_in_fresh_process(path: str, device: str, threads: int, inputs: list[tuple]) -> list[tuple]:
    """The package at `path` run on each of `inputs` (tuples of CPU tensors) by a fresh Python
    process with plain torch (FRESH_RUN), `threads` threads: its outputs, on the CPU. A process
    that fails or dies (torch's loader crashing on a package, say) is an error saying how."""
    import subprocess
    import sys
    import tempfile

    import torch

    from archspec.core.errors import bug

    with tempfile.TemporaryDirectory(prefix="archspec-aoti-check-") as work:
        given, got = os.path.join(work, "inputs.pt"), os.path.join(work, "outputs.pt")
        torch.save(list(inputs), given)
        command = [sys.executable, "-c", FRESH_RUN, path, given, got, device, str(threads)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=FRESH_SECONDS)
        except subprocess.TimeoutExpired:
            raise bug(f"a fresh Python process loading {PACKAGE} and running it took over "
                      f"{FRESH_SECONDS} s; stopped") from None
        if done.returncode != 0:
            hint = (f"the package was compiled by torch {torch.__version__}; the failure is in loading or running it "
                    "there, not in the spec")
            if device != "cpu":
                hint += ("; on the lent H200's torch 2.11 every CUDA AOTInductor package, a plain torch one too, died "
                         "so in a fresh process (README, --target aoti; tests/benchmarks/aoti_cuda_probe.py tells "
                         "whether this machine's torch loads any)")
            raise bug(fresh_failure(done.returncode, done.stderr), hint=hint) from None
        return torch.load(got, weights_only=True)


def fresh_failure(returncode: int, stderr: str) -> str:
    """What happened to the fresh process that loaded the package: the signal it died of, or its
    exit status, with the last line it wrote."""
    import signal

    if returncode < 0:
        try:
            how = f"died of {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"died of signal {-returncode}"
    else:
        how = f"exited with status {returncode}"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    said = f"; its last words: {last[:300]}" if last else ""
    return f"a fresh Python process loading {PACKAGE} and running it {how}{said}"


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def as_outputs(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def check_batches(span: tuple[int, int]) -> list[int]:
    """The two batch sizes the package is checked at: the smallest it takes and another one."""
    lo, hi = span
    other = 3 if lo < 3 <= hi else hi
    return [lo] if other == lo else [lo, other]


def on_device(compiled, device: str):
    """The loaded package as a function of CPU inputs giving CPU outputs (a tuple), run on
    `device` (a CUDA package takes its inputs on the GPU it was compiled for)."""
    def run(args):
        return tuple(o.cpu() for o in as_outputs(compiled(*(a.to(device) for a in args))))

    return run


def gpu_name(device: str) -> str:
    """The GPU's name and compute capability, as aoti.json and the progress line give it."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor}"


class Aoti(Target):
    name = "aoti"
    doc = "an AOTInductor package (model.aoti.pt2): compiled C++ kernels, dynamic batch, loads with plain torch"
    artifacts = "+ model.pt2, model.aoti.pt2, aoti.json"
    commands = ("build", "bench")
    build_precisions = ("fp32", "bf16")
    bench_precisions = ("fp32", "bf16")
    build_devices = ("cpu", "cuda")
    precision_docs = {"bf16": "model.aoti.pt2 computing in bf16, fp32 in and out"}
    needs = ("export",)
    order = 45

    def availability(self) -> Availability:
        """Usable when torch is installed and inductor finds its C++ compiler."""
        found = packages_availability(("torch",), "pip install torch")
        if not found.usable:
            return found
        compiler = cpp_compiler()
        if compiler is None:
            return Availability(False, f"{self.no_compiler()}: {COMPILER_HINT}", found.version)
        return Availability(True, version=f"{found.version}, C++ compiler {compiler}")

    @staticmethod
    def no_compiler() -> str:
        return NO_COMPILER.format(names=" or ".join(compiler_names()) or "g++")

    def precision_problem(self, precision: str, device: str) -> str | None:
        if precision == "int8":
            return ("int8 is ONNX Runtime's dynamic quantization of the linear layers: use --target "
                    + " or ".join(giving("int8")))
        if precision == "fp16":
            return "--target aoti gives fp32 or bf16 (fp16 on a CUDA GPU: --target tensorrt)"
        if precision == "bf16" and device == "cpu":
            from ..precision import cpu_has_bf16

            if not cpu_has_bf16():
                return BF16_NO
        return None

    def precision_title(self, precision: str) -> str:
        return f"{precision}: the package is compiled in {precision} below (model.py and model.safetensors stay fp32)"

    def apply_precision(self, model, graph, request):
        """Nothing cast yet: the export step traces the fp32 module, and this target's build
        compiles a bf16 copy of it; the package's deviation is measured there (precision.json)."""
        from ..precision import PrecisionResult

        result = PrecisionResult(request.precision, request.target, model=model)
        result.notes.append(f"{PACKAGE} is compiled in bf16 from the fp32 module (model.py and model.safetensors stay "
                            "fp32); its deviation from fp32 is measured after the compile")
        return result

    def preflight(self) -> None:
        """A C++ compiler must be there: say so before any work."""
        from archspec.core.errors import error

        if cpp_compiler() is None:
            raise error(f"--target aoti: {self.no_compiler()}", hint=COMPILER_HINT)

    def steps(self, precision: str) -> int:
        return 2

    # -- build -----------------------------------------------------------------------------------
    def build(self, context):
        """model.aoti.pt2 from the export's program (fp32) or a bf16 export; then loaded and
        compared with eager; aoti.json (and precision.json for bf16) records what was measured."""
        import torch

        span = batch_range_of(context.graph, context.batch)
        threads = torch.get_num_threads()
        device = context.device
        path = context.path(PACKAGE)
        started = time.perf_counter()

        def make():  # not model.pt2's program: the package's attention is written out (export_for_package)
            program = export_for_package(context.model, context.graph, context.precision, span, device)
            compile_package(program, path)
            return time.perf_counter() - started

        gpu = None if device == "cpu" else gpu_name(device)
        runs_on = plural(threads, "thread") if gpu is None else f"for {gpu}"
        what = f"{context.precision}, dynamic batch {span[0]}-{span[1]}, {runs_on}"
        title = f"AOTInductor ({what}) -> {PACKAGE}: {SLOW}"
        seconds = context.progress.run(title, make, lambda s: f"{os.path.getsize(path) / 2**20:.1f} MB")
        context.written.append(path)
        batches = check_batches(span)
        checked = context.progress.run(f"load {PACKAGE} in a fresh process (plain torch) and compare it with "
                                       f"eager at batch {' and '.join(map(str, batches))}",
                                       lambda: self.verify(context, path, batches, threads), self.describe_check)
        named = device if gpu is None else f"{device} ({gpu})"
        record = {"package": PACKAGE, "precision": context.precision, "batch": list(span), "threads": threads,
                  "compile_s": round(seconds, 1), "torch": torch.__version__, "compiler": cpp_compiler(),
                  "device": named, "checks": checked["checks"],
                  "deviation": None if checked["deviation"] is None else checked["deviation"].to_json()}
        context.write_text("aoti.json", json.dumps(record, indent=2))
        if checked["deviation"] is not None:
            self.record_precision(context, checked["deviation"])
        return path

    def verify(self, context, path: str, batches: list[int], threads: int) -> dict:
        """The package, loaded and run by a fresh process (run_in_fresh_process), against the
        eager fp32 module: max |difference| at each of `batches`; for bf16 also the measured
        deviation (with top-1 agreement for classifiers), on inputs sent there beforehand."""
        import torch

        from ..export import example_inputs, max_abs_difference
        from ..precision import deviation_inputs, eager_runner, measure_deviation

        low = context.precision != "fp32"
        checked = [example_inputs(context.graph, batch=batch) for batch in batches]
        sampled = deviation_inputs(context.graph, batches[-1], DEVIATION_SAMPLES) if low else []
        outputs = run_in_fresh_process(path, context.device, threads, checked + sampled)
        by_input = {id(args): out for args, out in zip(checked + sampled, outputs)}
        reference = eager_runner(context.model)
        checks = []
        for batch, args in zip(batches, checked):
            with torch.no_grad():
                gap = max_abs_difference(by_input[id(args)], as_outputs(reference(args)))
            checks.append({"batch": batch, "max_abs": gap})
        deviation = None
        if low:
            deviation = measure_deviation(reference, lambda args: by_input[id(args)], context.graph,
                                          context.precision, self.name, inputs=sampled)
        return {"checks": checks, "deviation": deviation}

    @staticmethod
    def describe_check(checked: dict) -> str:
        gaps = ", ".join(f"batch {c['batch']} {c['max_abs']:.2e}" for c in checked["checks"])
        text = f"max |aoti - eager| {gaps}"
        if checked["deviation"] is not None:
            text += f"; {checked['deviation'].summary()}"
        return text

    @staticmethod
    def record_precision(context, deviation) -> None:
        """precision.json with the package's measured deviation (the build wrote one without it)."""
        from ..precision import PrecisionResult

        result = PrecisionResult(deviation.precision, deviation.target, files=[context.path(PACKAGE)],
                                 deviation=deviation)
        path = context.path("precision.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(result.to_json(), indent=2))
        if path not in context.written:
            context.written.append(path)

    # -- bench -----------------------------------------------------------------------------------
    def bench(self, model, graph, precision: str, *, workdir: str, threads: int, device: str):
        """The package compiled here for the spec's batch range (kernels for `threads` threads),
        loaded back and run as a user would."""
        import torch

        from ..bench import Prepared, bench_inputs
        from ..timing import synchronizer

        path = os.path.join(workdir, f"{graph.name}.{precision}.{device.replace(':', '_')}.aoti.pt2")
        if not os.path.exists(path):
            span = (graph.dims["B"].lo, graph.dims["B"].hi)
            compile_package(export_for_package(model, graph, precision, span, device), path)
        compiled = load_package(path)
        sync = synchronizer(device)

        def bind(batch: int):
            args = bench_inputs(graph, batch, device=device)

            def run():
                with torch.inference_mode():
                    compiled(*args)
                sync()

            return run

        on_cpu = on_device(compiled, device)

        def outputs(args):
            with torch.inference_mode():
                return tuple(o.float() for o in on_cpu(args))

        return Prepared(bind, outputs, f"AOTInductor package, kernels compiled for {plural(threads, 'thread')}")


register(Aoti())
