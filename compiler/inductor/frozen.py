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

import os
import subprocess
import sys

import torch
import torch.utils._pytree as pytree

from ..quiet import quiet_cpp_extension

FROZEN = {"freezing": True}

# Inductor's own C++ GEMM kernels (its CPP template: weights packed for them, AVX-512 micro
# kernels) offered beside oneDNN's for each linear, the faster at each shape kept, as measured
# during the compile (about 3 s a distinct shape). Where a matrix multiplies one row, as in the
# decode step, oneDNN spends some 18 us a call whatever the size: on an Intel Xeon without AMX
# (2 threads) the shipped llama's 17 bf16 matrix-vector products took 1.75 ms through oneDNN
# and 1.46 ms through the template (0.013 vs 0.033 ms for a 768x512 matrix, 0.74 ms each for the
# 32000x512 head), with the same outputs. CPU only (on a GPU it would autotune Triton kernels).
TUNED_LINEARS = {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN",
                 "autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False}  # nothing printed


def compile_frozen(program: torch.export.ExportedProgram, path: str, options: dict | None = None) -> str:
    """`program` compiled by AOTInductor, frozen, into the package at `path` (a .pt2 file);
    `options`: inductor's settings over FROZEN (TUNED_LINEARS; compile_unpacked's process turns
    packing off)."""
    with quiet_cpp_extension(), torch.no_grad():
        return torch._inductor.aoti_compile_and_package(program, package_path=path,
                                                        inductor_configs=FROZEN | (options or {}))


class FrozenProgram:
    """A package loaded, called with its input tensors in order. AOTInductor's own loaded model
    reads its input and output structures back from text at every call (15 us, 1% of a decoded
    token of the shipped llama); here the output structure is read once."""

    def __init__(self, path: str):
        with quiet_cpp_extension():  # torch's "No CUDA runtime is found" advice
            self.loader = torch._inductor.aoti_load_package(path).loader
        self.outputs = pytree.treespec_loads(self.loader.get_call_spec()[1])

    def __call__(self, *tensors: torch.Tensor):
        return pytree.tree_unflatten(self.loader.boxed_run(list(tensors)), self.outputs)


def load_frozen(path: str) -> FrozenProgram:
    """The package at `path` loaded."""
    return FrozenProgram(path)


def compile_unpacked(program: torch.export.ExportedProgram, path: str) -> str:
    """compile_frozen with inductor's weight packing off (`cpp.weight_prepack`: linears as
    F.linear's products on the weights as they are, the rest frozen), in a process of its own.

    Not in this one: inductor registers its packing patterns once per process, at the first
    frozen compile, as that compile's setting says; a compile with packing off there left every
    later compile of the process unpacked (a bf16 decode step after an fp32 one: 1.5x slower),
    and one with packing on made the setting do nothing afterwards. The program goes to the
    other process as a torch.export file beside `path`, removed after."""
    exported = path + ".exported.pt2"
    torch.export.save(program, exported)
    try:
        command = [sys.executable, "-m", __name__, exported, path, str(torch.get_num_threads())]
        done = subprocess.run(command, capture_output=True, text=True)
    finally:
        os.remove(exported)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()] or [f"exit code {done.returncode}"]
        raise RuntimeError(f"compiling the program (weight packing off) failed in its own process: {lines[-1][:300]}")
    return path


def main(exported: str, path: str, threads: str) -> None:
    torch.set_num_threads(int(threads))
    compile_frozen(torch.export.load(exported), path, {"cpp.weight_prepack": False})


if __name__ == "__main__":
    main(*sys.argv[1:])
