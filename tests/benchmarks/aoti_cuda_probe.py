"""Why does `build --target aoti --device cuda`'s package die when plain torch loads it? (issue 21)

On the lent H200 (torch 2.11.0+cu130, 2026-11-27) a tiny ViT's CUDA package, frozen or not,
died of SIGSEGV inside torch's loader (load_pt2 -> _load_aoti) in a fresh process, 39-49 s
after the process started, whether or not CUDA was initialised first; bench_vs_peers.py's
full-size packages, loaded in the process that compiled them, ran. This script separates the
cases left: full-size against tiny, fresh process against the compiling one. Each load runs
in its own process (a crash ends that case only); its whole output goes to $OUT/<case>.txt,
and gdb's backtrace too where gdb is installed. Run on the GPU machine, archspec installed:

    python3 -P tests/benchmarks/aoti_cuda_probe.py     (about 4 minutes on the H200)
"""
import os
import shutil
import subprocess
import sys
import textwrap
import time

import torch

import archspec
from archspec.compiler.backends.targets.aoti import compile_package, export_for_package
from archspec.compiler.lower import lower

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.environ.get("OUT", "aoti-probe-out")
TINY = {"img": 32, "depth": 1, "classes": 10}

# A fresh interpreter: optionally compile first (in-process case), then load and run the package.
LOADER = textwrap.dedent("""
    import faulthandler, sys, time, torch
    faulthandler.enable()
    started = time.time()
    path, how, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if how == "init":
        torch.zeros(1, device="cuda")
    print(f"torch imported, cuda {'initialised' if how == 'init' else 'untouched'} at {time.time() - started:.1f} s",
          flush=True)
    model = torch._inductor.aoti_load_package(path)
    print(f"loaded at {time.time() - started:.1f} s", flush=True)
    with torch.no_grad():
        out = model(torch.randn(2, 3, size, size, device="cuda"))
    torch.cuda.synchronize()
    print(f"ran at {time.time() - started:.1f} s: {tuple(out.shape)}", flush=True)
""")


def package(name: str, overrides: dict) -> str:
    """The CUDA package `build --target aoti --device cuda` compiles (fp32, batch 1-64)."""
    started = time.time()
    report = archspec.check(os.path.join(ROOT, "specs", "vit_ti16.yaml"), overrides)
    model = lower(report.graph, seed=0).eval()
    path = os.path.join(OUT, f"{name}.pt2")
    compile_package(export_for_package(model, report.graph, "fp32", (1, 64), "cuda"), path)
    print(f"{name}: compiled in {time.time() - started:.0f} s", flush=True)
    return path


def load(case: str, path: str, how: str, size: int) -> None:
    """`path` loaded and run by a fresh interpreter; its output in $OUT/<case>.txt."""
    command = [sys.executable, "-c", LOADER, path, how, str(size)]
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    with open(os.path.join(OUT, f"{case}.txt"), "w") as f:
        f.write(done.stdout + done.stderr)
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    print(f"  {case}: rc {done.returncode} after {time.time() - started:.0f} s; first lines: {said[:4]}", flush=True)
    if done.returncode < 0 and shutil.which("gdb"):
        traced = subprocess.run(["gdb", "-batch", "-ex", "run", "-ex", "bt 30", "--args", *command],
                                capture_output=True, text=True, timeout=300)
        with open(os.path.join(OUT, f"{case}.gdb.txt"), "w") as f:
            f.write(traced.stdout + traced.stderr)


def in_compiling_process(path: str, size: int) -> None:
    """The package loaded by this process, which compiled it (as bench_vs_peers.py does)."""
    try:
        model = torch._inductor.aoti_load_package(path)
        with torch.no_grad():
            out = model(torch.randn(2, 3, size, size, device="cuda"))
        torch.cuda.synchronize()
        print(f"  in the compiling process: ran, {tuple(out.shape)}", flush=True)
    except Exception as failure:  # noqa: BLE001 - a probe: every outcome is printed
        print(f"  in the compiling process: {type(failure).__name__}: {failure}", flush=True)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, gdb: {shutil.which('gdb')}", flush=True)
    full = package("full", {})
    load("full_fresh", full, "init", 224)
    tiny = package("tiny", TINY)
    load("tiny_fresh", tiny, "init", 32)
    in_compiling_process(full, 224)  # last: a crash here ends the probe
    in_compiling_process(tiny, 32)


if __name__ == "__main__":
    main()
