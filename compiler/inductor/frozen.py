"""An exported program compiled by AOTInductor frozen, for `build --target aoti`'s package
(backends/targets/aoti.py) and generate(compile=True)'s decode step (generate/compiled.py).

Frozen (inductor's freezing): the weights are the package's constants, so inductor folds what
depends only on them and packs each linear's weight once into oneDNN's blocked layout, the
activation or residual add after it fused (in an AOT compile fp32 goes to oneDNN too, not MKL).
Without it every linear was an MKL matrix product, which on AMD's AVX-512 CPUs runs at half
oneDNN's rate: vit_s16 fp32 at batch 1 took 55 ms plain, 28 ms frozen, 30 ms eager (AMD EPYC,
2 threads). Inductor freezes only with grad off, so the compile runs under no_grad; passing
the option with grad on changes nothing.
"""

from __future__ import annotations

import torch

from ..quiet import quiet_cpp_extension

FROZEN = {"freezing": True}


def compile_frozen(program: torch.export.ExportedProgram, path: str, options: dict | None = None) -> str:
    """`program` compiled by AOTInductor, frozen, into the package at `path` (a .pt2 file);
    `options`: more of inductor's settings (the decode step's `cpp.weight_prepack`)."""
    with quiet_cpp_extension(), torch.no_grad():
        return torch._inductor.aoti_compile_and_package(program, package_path=path,
                                                        inductor_configs=FROZEN | (options or {}))


def load_frozen(path: str):
    """The package at `path` loaded (torch's "No CUDA runtime is found" advice kept quiet)."""
    with quiet_cpp_extension():
        return torch._inductor.aoti_load_package(path)
