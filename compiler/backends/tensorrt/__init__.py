"""TensorRT backend: torch-tensorrt's dynamo path, fp32 or fp16, a static batch or a range.

    archspec check SPEC --target tensorrt [--batch N | MIN:OPT:MAX]     coverage only
    archspec build SPEC --target tensorrt [--precision fp16] [--batch ...]

Coverage first: every op of the exported graph must convert, nothing may fall back to
PyTorch; then the engine is built in a child process. One concern per module:

    runtime.py    loading torch-tensorrt (import work-arounds, install hints), settings, versions
    cuda_stub.py  the one place torch-tensorrt's CUDA questions are answered without a GPU
    program.py    torch.export in the engine's precision and batch range; the inputs' profile
    coverage.py   the coverage check, over torch-tensorrt's private converter registry
                  (ConverterRegistry, the one adapter), and its CoverageReport
    failure.py    the fx node a failed build was converting, located at its spec node
    job.py        the typed Job and Outcome that cross the process boundary; running the child
    worker.py     the child process that builds the engine and writes its files
    engine.py     build_engine: export, coverage, the child; EngineResult or a located error
"""

from .coverage import CoverageReport, check_coverage, coverage_report
from .cuda_stub import gpu_present
from .engine import STEPS, EngineResult, build_engine
from .program import export_for_tensorrt
from .runtime import _settings_kwargs, backend_name, is_rtx, load_torch_tensorrt

__all__ = ["STEPS", "CoverageReport", "EngineResult", "_settings_kwargs", "backend_name", "build_engine",
           "check_coverage", "coverage_report", "export_for_tensorrt", "gpu_present", "is_rtx",
           "load_torch_tensorrt"]
