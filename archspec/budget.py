"""Whether a checked spec can be built on this machine: the memory its build needs, estimated
from the report before torch allocates anything.

A spec whose sizes pass every shape rule may still ask for more memory than any machine has
(`mlp: {hidden: 16777216}` on a width of 16,777,216 is 2.8e14 parameters). Building it would
fail deep inside torch, or worse, succeed in reserving the memory and then exhaust the
machine while initialising it. So `build` first estimates what it needs (the parameters in
float32, twice: the model and what is saved or exported from it; the fixed tables, indices and
masks its modules precompute, which grow with the input size; for targets that run the model,
its activations at the example batch) and refuses, with a plain error, a build that
needs more than the memory available (or than ARCHSPEC_MAX_BUILD_BYTES, when set).
"""

from __future__ import annotations

import os

from .core.errors import error
from .primitives.counting import FLOAT_BYTES

MAX_BUILD_BYTES = "ARCHSPEC_MAX_BUILD_BYTES"  # env: the most memory a build may plan to use, in bytes
EXAMPLE_RUNS = 3 * 3  # example batch (up to 3) x intermediate tensors per node (about 3)


def needed_bytes(report, runs_model: bool) -> int:
    """About the memory a build of `report` needs (an estimate, on the high side)."""
    weights = sum(module_bytes(row) for row in report.nodes)
    if not runs_model:
        return weights
    return weights + EXAMPLE_RUNS * sum(row.activation_bytes for row in report.nodes)


def available_bytes() -> int | None:
    """The memory a build may use: ARCHSPEC_MAX_BUILD_BYTES, else what the system has available."""
    limit = os.environ.get(MAX_BUILD_BYTES, "").strip()
    if limit:
        try:
            return max(0, int(float(limit)))
        except ValueError:
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


def check_build_memory(report, runs_model: bool = True) -> None:
    """A SpecError, located at the node whose module needs the most, when the build would need
    more memory than it may use."""
    need, have = needed_bytes(report, runs_model), available_bytes()
    if have is None or need <= have:
        return
    largest = max(report.nodes, key=module_bytes, default=None)
    path = largest.path if largest is not None and module_bytes(largest) else None
    loc = report.graph.record(path).loc if path is not None else None
    buffers = sum(row.buffer_bytes for row in report.nodes)
    parts = [f"{report.params:,} parameters in float32"] + \
        [f"{human(buffers)} of fixed tables and masks"] * bool(buffers) + ["activations"] * runs_model
    raise error(f"building this model needs about {human(need)} of memory ({' plus '.join(parts)}), and "
                f"{human(have)} is available", loc, path,
                hint=f"check the sizes (dim, hidden, heads, input size); set {MAX_BUILD_BYTES} to allow more")


def module_bytes(row) -> int:
    """A node's parameters in float32, twice (the model and what is saved or exported from it),
    and its fixed tables."""
    return 2 * FLOAT_BYTES * row.params + row.buffer_bytes


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
