"""The one place where archspec answers torch-tensorrt's CUDA questions on a machine with no GPU.

torch-tensorrt assumes a GPU: it asks torch.cuda about the device while it is imported and
each time it builds its settings, and, after building an engine, it loads the engine back
onto the GPU. With torch-tensorrt-rtx none of that is needed to *build*: TensorRT-RTX
compiles an engine ahead of time on the CPU (kernels are JIT-compiled later, on the RTX GPU
that runs it). So, only while torch-tensorrt works and only when torch.cuda has no device,
the TensorRT backend answers those questions here:

  no_gpu_answers()     torch.cuda.get_device_capability -> (12, 0)
                         asked at import by torch_tensorrt._utils.is_tegra_platform(); any
                         value other than a Tegra/Thor one, (8, 7) (7, 2) (11, 0), behaves alike
                       torch.cuda.current_device -> 0
                         the default of every CompilationSettings (dynamo/_defaults.py) and
                         of device resolution (_Device.py)
                       torch.cuda.get_device_properties, device_count, mem_get_info
                         a plain description of one device; asked only on rarer paths
                         (serialized device info, runtime checks, offloading)
  plan_only_runtime()  tensorrt.Runtime -> a stub whose deserialize_cuda_engine(plan) hands
                         the plan back. TRTInterpreter.run() (RTX path) deserialises the plan
                         it just built, which needs a GPU; the build itself does not.

Everything is restored on exit. With a GPU present both context managers do nothing.
torch.cuda.is_available() is never faked: it stays False, so nothing tries to use a device.
Found by logging every torch.cuda call torch-tensorrt-rtx 2.14.0 makes (import, lowering,
converter queries, engine build).
"""

from __future__ import annotations

import contextlib
import sys
from types import SimpleNamespace
from typing import Iterator

import torch

CAPABILITY = (12, 0)  # an RTX-class GPU (Blackwell); not a Tegra/Thor capability
MEMORY = 32 * 1024**3


def gpu_present() -> bool:
    return torch.cuda.is_available()


@contextlib.contextmanager
def no_gpu_answers() -> Iterator[None]:
    """Answer torch.cuda's device queries for one fake device while the block runs."""
    if gpu_present():
        yield
        return
    props = SimpleNamespace(name="no GPU (archspec ahead-of-time build)", major=CAPABILITY[0],
                            minor=CAPABILITY[1], total_memory=MEMORY, multi_processor_count=1,
                            is_integrated=False, uuid="00000000-0000-0000-0000-000000000000",
                            L2_cache_size=0)
    answers = {
        "get_device_capability": lambda device=None: CAPABILITY,
        "get_device_properties": lambda device=None: props,
        "current_device": lambda: 0,
        "device_count": lambda: 1,
        "mem_get_info": lambda device=None: (MEMORY, MEMORY),
    }
    saved = {name: getattr(torch.cuda, name) for name in answers}
    try:
        for name, fn in answers.items():
            setattr(torch.cuda, name, fn)
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)


class _Plan:
    """Stands in for an ICudaEngine that cannot be loaded here: gives the plan back."""

    def __init__(self, plan):
        self._plan = plan

    def serialize(self):
        return self._plan

    def get_aliased_input_tensor(self, name):
        return None  # archspec models alias no input to an output


class _PlanOnlyRuntime:
    def __init__(self, logger=None):
        self.logger = logger

    def deserialize_cuda_engine(self, plan):
        return _Plan(plan)


@contextlib.contextmanager
def plan_only_runtime() -> Iterator[None]:
    """no_gpu_answers() plus a tensorrt.Runtime that does not load the built plan.

    Only for torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine, which
    returns the plan's bytes. The stub is set on the `tensorrt` module torch-tensorrt
    imports (with torch-tensorrt-rtx, an alias of tensorrt_rtx) and removed on exit."""
    with no_gpu_answers():
        if gpu_present():
            yield
            return
        import torch_tensorrt  # noqa: F401  (installs sys.modules["tensorrt"])

        trt = sys.modules["tensorrt"]
        had = "Runtime" in vars(trt)
        old = vars(trt).get("Runtime")
        trt.Runtime = _PlanOnlyRuntime
        try:
            yield
        finally:
            if had:
                trt.Runtime = old
            else:
                del trt.Runtime
