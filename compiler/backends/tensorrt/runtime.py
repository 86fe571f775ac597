"""Loading torch-tensorrt and the settings archspec compiles with.

`load_torch_tensorrt` imports it with its import-time noise hidden (loggers, Python warnings,
the TensorRT C++ library's device warning on fd 2) and its CUDA questions answered when there
is no GPU (cuda_stub.py); a missing or broken install is a clear error saying what to
install. `_settings_kwargs` is the one set of compile settings, `backend_name` the versions
a report names.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import warnings
from dataclasses import fields

import torch

from archspec.core.errors import error

from .cuda_stub import gpu_present, no_gpu_answers

INSTALL_HINT = ("pip install 'archspec-compiler[tensorrt-rtx]' (RTX-class GPUs; builds engines even on a machine "
                "without a GPU) or 'archspec-compiler[tensorrt]' (data-centre GPUs; needs a CUDA GPU to build)")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
RTX_TARGET = ("RTX-class NVIDIA GPUs (Ampere or newer: SM 8.0, 8.6, 8.9, 12.0+) with TensorRT-RTX "
              "{version}; its kernels are compiled on that GPU at first run")


@contextlib.contextmanager
def quiet():
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
        with no_gpu_answers(), quiet(), _silence_stderr_fd():
            import torch_tensorrt
    except Exception as exc:  # noqa: BLE001 - a broken install, reported plainly
        sys.modules.pop("torch_tensorrt", None)
        first = (str(exc).strip().splitlines() or [""])[0]
        raise error(f"torch-tensorrt is installed but does not import: {type(exc).__name__}: {first}",
                    hint=f"it must match torch {torch.__version__.split('+')[0]}; reinstall with "
                         f"{INSTALL_HINT}") from None
    return torch_tensorrt


def torch_tensorrt_version(tt) -> str:
    """'2.14.0' for torch-tensorrt 2.14.0+cu130."""
    return tt.__version__.split("+")[0]


def tensorrt_version() -> str:
    """The version of the TensorRT (or TensorRT-RTX) library torch-tensorrt imported."""
    return getattr(sys.modules.get("tensorrt"), "__version__", "?")


def is_rtx(tt) -> bool:
    return bool(getattr(tt.ENABLED_FEATURES, "tensorrt_rtx", False))


def backend_name(tt) -> str:
    if is_rtx(tt):
        return f"torch-tensorrt-rtx {torch_tensorrt_version(tt)}, TensorRT-RTX {tensorrt_version()}"
    return f"torch-tensorrt {torch_tensorrt_version(tt)}, TensorRT {tensorrt_version()}"


def _settings_kwargs(tt, precision: str, **extra) -> dict:
    """The compile settings archspec uses, limited to those this torch-tensorrt knows (it
    silently swallows unknown keyword arguments)."""
    known = {f.name for f in fields(tt.dynamo.CompilationSettings)}
    kw = dict(require_full_compilation=True, min_block_size=1, disable_tf32=precision == "fp32",
              offload_module_to_cpu=not gpu_present(), **extra)  # (no torch.cuda.mem_get_info without a GPU)
    if not is_rtx(tt):  # data-centre TensorRT: follow the graph's dtypes (model.half() for fp16)
        kw.update(use_explicit_typing=True, enabled_precisions={DTYPES[precision]})
    return {k: v for k, v in kw.items() if k in known}
