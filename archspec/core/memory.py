"""The memory a build may use, and how messages write a number of bytes.

One budget for every floor: `build`'s estimate (archspec/budget.py) and the checkpoint reader
(compiler/weights/checkpoint.py) both refuse work that needs more than `available_bytes()`:
ARCHSPEC_MAX_BUILD_BYTES when set, else the memory the system has available. What fails to
allocate anyway is told apart by `ran_out_of_memory(exc)`.
"""

from __future__ import annotations

import os

MAX_BUILD_BYTES = "ARCHSPEC_MAX_BUILD_BYTES"  # env: the most memory a build may plan to use, in bytes
ALLOCATION_FAILURES = ("failed to allocate memory", "can't allocate memory", "cannot allocate memory",
                       "out of memory", "bad_alloc", "not enough memory")


def ran_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation failure (of Python, torch, CUDA or ONNX Runtime): every floor
    that makes tensors turns one into the located "ran out of memory" error, never a traceback."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return any(words in text for words in ALLOCATION_FAILURES)


def available_bytes() -> int | None:
    """The memory a build may use: ARCHSPEC_MAX_BUILD_BYTES, else what the system has available."""
    limit = os.environ.get(MAX_BUILD_BYTES, "").strip()
    if limit:
        try:
            return max(0, int(float(limit)))
        except (ValueError, OverflowError):
            pass
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def human(n: int) -> str:
    """A size in bytes as people read it: 512 B, 64.0 MB, 1.0 GB (units of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
