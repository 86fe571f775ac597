"""How long `archspec check SPEC` takes as a new process, and that it imports no torch.

    python tests/benchmarks/check_time.py [specs/swin_t.yaml] [--runs 15]

Prints every run's wall time, the median and the median CPU time (user + system: on a machine
shared with other jobs the wall time grows with their load, the CPU time much less). Python normally caches compiled bytecode
(__pycache__); where PYTHONDONTWRITEBYTECODE is set every run compiles archspec's sources
again (about 0.2 s more on a 2-core machine), and the script says so.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec", nargs="?", default="specs/swin_t.yaml")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    exe = shutil.which("archspec")
    command = [exe, "check", args.spec] if exe else [sys.executable, "-m", "archspec", "check", args.spec]
    subprocess.run(command, check=True, capture_output=True)  # warm the file cache
    times, cpus = [], []
    for _ in range(args.runs):
        start, used = time.perf_counter(), children_cpu()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
        cpus.append(children_cpu() - used)  # the run's own CPU time: what another job's load does not add
    probe = ("import sys, archspec; archspec.check(sys.argv[1]); "
             "print('torch imported' if 'torch' in sys.modules else 'no torch')")
    torch_state = subprocess.run([sys.executable, "-c", probe, args.spec], capture_output=True, text=True).stdout
    print(f"{' '.join(command[-2:])}: runs {', '.join(f'{t:.3f}' for t in times)} s")
    cache = "no bytecode cache (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else \
        "bytecode cached"
    print(f"median {statistics.median(times):.3f} s, min {min(times):.3f} s (CPU: median {statistics.median(cpus):.3f} s); "
          f"{torch_state.strip()}; {cache}")


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
