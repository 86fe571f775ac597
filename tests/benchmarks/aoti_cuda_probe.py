"""Why does `build --target aoti --device cuda`'s package die when plain torch loads it? (issue 21)

On the lent H200 (torch 2.11.0+cu130, 2026-11-27) a tiny ViT's CUDA package, frozen or not,
died of SIGSEGV inside torch's loader (load_pt2 -> _load_aoti) in a fresh process, 39-49 s
after the process started, whether or not CUDA was initialised first; bench_vs_peers.py's
full-size packages, loaded in the process that compiled them, ran.

This probe separates the causes in one run. Packages (compiled here, one after another):
  vit           the tiny ViT as `build --target aoti --device cuda` compiles it (frozen)
  vit_embedded  the same with the kernels' binaries inside the .so (aot_inductor.embed_kernel_binary)
  linear        a two-layer torch MLP, no archspec at all: is it torch's loader or archspec's program?
Loaders (each a fresh interpreter, all running at once, each with its own timeout):
  plain         plain torch: import, load, run
  archspec      archspec's own check (run_in_fresh_process, the FRESH_RUN that `build` runs)
  libcuda       libcuda.so.1 opened RTLD_GLOBAL and CUDA initialised before loading
  inductor      inductor and Triton warmed (a torch.compile'd function run on the GPU) before loading
  runner        the package's .so run by torch's container runner (AOTIModelContainerRunnerCuda), not
                the package loader
  in_process    the package loaded by this process, which compiled it (last: a crash ends the probe)
Each loader's output, outputs' gap to eager on the GPU and timings go to $OUT/<package>.<loader>.txt;
the .so's dynamic section and ldd to $OUT/<package>.libs.txt; gdb's backtrace where gdb exists;
$OUT/summary.txt has one line per case. Run on the GPU machine, archspec installed:

    python3 -P tests/benchmarks/aoti_cuda_probe.py     (about 4 minutes on the H200)

PROBE_ONLY=linear (or vit, vit_embedded) compiles that package alone and skips the in-process
load. PROBE_DEVICE=cpu runs the same flow on the CPU (the libcuda and inductor preambles then only
import), to try the probe itself where there is no GPU.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.utils.cpp_extension

import archspec
from archspec.compiler.backends.targets.aoti import export_for_package, run_in_fresh_process
from archspec.compiler.inductor.frozen import FROZEN
from archspec.compiler.lower import lower

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.environ.get("OUT", "aoti-probe-out")
WORK = tempfile.mkdtemp(prefix="aoti-probe-")  # packages, inputs and outputs: not sent back
TINY = {"img": 32, "depth": 1, "classes": 10}
LOAD_SECONDS = 240
DEVICE = os.environ.get("PROBE_DEVICE", "cuda")
ONLY = os.environ.get("PROBE_ONLY")  # one package (vit, vit_embedded, linear) and no in-process load
SUMMARY = []

# A fresh interpreter: a preamble (the loader's kind), then load the package, run it on the saved
# inputs and save its outputs (on the CPU).
LOADER = textwrap.dedent("""
    import faulthandler, sys, time
    faulthandler.enable()
    started = time.time()
    import torch
    path, kind, inputs, outputs, device = sys.argv[1:6]
    print(f"torch {torch.__version__} imported at {time.time() - started:.1f} s", flush=True)
    if kind == "libcuda" and device == "cuda":
        import ctypes
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        torch.zeros(1, device="cuda")
    elif kind == "inductor":
        print("warm:", torch.compile(lambda x: x * 2)(torch.ones(4, device=device)).sum().item(), flush=True)
    print(f"preamble {kind} done at {time.time() - started:.1f} s", flush=True)
    if kind == "runner":  # the package's .so run by torch's container runner, without the package loader
        import glob, os, tempfile, zipfile
        folder = tempfile.mkdtemp()
        zipfile.ZipFile(path).extractall(folder)
        (so,) = glob.glob(os.path.join(folder, "**", "*.wrapper.so"), recursive=True)
        print(f"extracted at {time.time() - started:.1f} s: {os.path.relpath(so, folder)}", flush=True)
        runner = torch._C._aoti.AOTIModelContainerRunnerCuda(so, 1, "cuda", os.path.dirname(so)) if device == "cuda" \
            else torch._C._aoti.AOTIModelContainerRunnerCpu(so, 1)
        model = lambda x: runner.run([x])[0]
    else:
        model = torch._inductor.aoti_load_package(path)
    print(f"loaded at {time.time() - started:.1f} s", flush=True)
    with torch.no_grad():
        out = [model(x.to(device)).cpu() for x in torch.load(inputs)]
    torch.save(out, outputs)
    print(f"ran at {time.time() - started:.1f} s: {[tuple(o.shape) for o in out]}", flush=True)
""")


def say(line: str) -> None:
    SUMMARY.append(line)
    print(line, flush=True)


def environment() -> None:
    """What the machine has that the loader might depend on."""
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "no GPU (PROBE_DEVICE=cpu)"
    facts = [f"torch {torch.__version__}, cuda {torch.version.cuda}, {gpu}",
             f"gdb: {shutil.which('gdb')}, CUDA_HOME: {os.environ.get('CUDA_HOME')}",
             f"cpp_extension.CUDA_HOME: {torch.utils.cpp_extension.CUDA_HOME}"]
    for command in (["sh", "-c", "ldconfig -p | grep -i libcuda"], ["sh", "-c", "ls -d /usr/local/cuda*/lib64/stubs"]):
        done = subprocess.run(command, capture_output=True, text=True)
        facts.append(f"{' '.join(command[2:])}: {done.stdout.strip() or done.stderr.strip() or '(nothing)'}")
    for fact in facts:
        say(fact)


def tiny_vit():
    report = archspec.check(os.path.join(ROOT, "specs", "vit_ti16.yaml"), TINY)
    return lower(report.graph, seed=0).eval(), report.graph


def cpu_tensors_in(program) -> list[str]:
    """Tensors of a CUDA program that live on the CPU (pytorch#190000's crash has such)."""
    found = [f"{kind} {name}" for kind, table in (("state", program.state_dict), ("constant", program.constants))
             for name, value in table.items() if isinstance(value, torch.Tensor) and value.device.type != DEVICE]
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and value.device.type != DEVICE:
            found.append(f"node {node.name} ({node.op} {node.target})")
    return found


def compile_variant(name: str, configs: dict):
    """(package path, eager module on the GPU, its example input) for one variant."""
    started = time.time()
    if name == "linear":
        model = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.GELU(), torch.nn.Linear(64, 10)).eval()
        example = torch.randn(2, 48)
        batch = torch.export.Dim("batch", min=1, max=64)
        with torch.no_grad():
            program = torch.export.export(model.to(DEVICE), (example.to(DEVICE),), dynamic_shapes=({0: batch},))
    else:
        model, graph = tiny_vit()
        example = torch.randn(2, 3, 32, 32)
        program = export_for_package(model, graph, "fp32", (1, 64), DEVICE)
        model = model.to(DEVICE)
    cpu = cpu_tensors_in(program)
    say(f"{name}: CPU tensors in the CUDA program: {cpu[:8] or 'none'}{' ...' if len(cpu) > 8 else ''}")
    path = os.path.join(WORK, f"{name}.pt2")
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs=configs)
    say(f"{name}: compiled in {time.time() - started:.0f} s, {os.path.getsize(path) / 2**20:.1f} MB")
    libraries(name, path)
    return path, model, example


def libraries(name: str, path: str) -> None:
    """The package's files, and its .so's dynamic section and ldd, to $OUT/<name>.libs.txt."""
    with tempfile.TemporaryDirectory() as work, open(os.path.join(OUT, f"{name}.libs.txt"), "w") as f:
        with zipfile.ZipFile(path) as archive:
            f.write("\n".join(f"{i.file_size:>10} {i.filename}" for i in archive.infolist()) + "\n")
            archive.extractall(work)
        for folder, _, files in os.walk(work):
            for so in (os.path.join(folder, n) for n in files if n.endswith(".so")):
                for command in (["readelf", "-d", so], ["ldd", so]):
                    done = subprocess.run(command, capture_output=True, text=True)
                    f.write(f"\n$ {' '.join(command[:-1])} {os.path.basename(so)}\n{done.stdout}{done.stderr}")


def start_load(name: str, kind: str, path: str, inputs: str):
    outputs = os.path.join(WORK, f"{name}.{kind}.out.pt")
    log = open(os.path.join(OUT, f"{name}.{kind}.txt"), "w")
    process = subprocess.Popen([sys.executable, "-c", LOADER, path, kind, inputs, outputs, DEVICE],
                               stdout=log, stderr=subprocess.STDOUT, text=True)
    return {"name": name, "kind": kind, "process": process, "log": log, "outputs": outputs,
            "started": time.time(), "path": path, "inputs": inputs}


def finish_load(load: dict, expected: list) -> None:
    try:
        rc = load["process"].wait(timeout=max(1, LOAD_SECONDS - (time.time() - load["started"])))
    except subprocess.TimeoutExpired:
        load["process"].kill()
        rc = "timeout"
    load["log"].close()
    seconds = time.time() - load["started"]
    with open(load["log"].name) as f:
        said = [line.strip() for line in f if line.strip()]
    case = f"{load['name']}.{load['kind']}"
    if rc == 0:
        got = torch.load(load["outputs"])
        gap = max((g - e).abs().max().item() for g, e in zip(got, expected))
        say(f"  {case}: ran, rc 0 in {seconds:.0f} s, max |package - eager on the GPU| {gap:.2e}")
    else:
        say(f"  {case}: rc {rc} after {seconds:.0f} s; last lines: {said[-5:]}")
        if isinstance(rc, int) and rc < 0 and shutil.which("gdb") and load["kind"] == "plain":
            backtrace(case, load)


def backtrace(case: str, load: dict) -> None:
    command = [sys.executable, "-c", LOADER, load["path"], "plain", load["inputs"], load["outputs"], DEVICE]
    traced = subprocess.run(["gdb", "-batch", "-ex", "run", "-ex", "bt 40", "--args", *command],
                            capture_output=True, text=True, timeout=300)
    with open(os.path.join(OUT, f"{case}.gdb.txt"), "w") as f:
        f.write(traced.stdout + traced.stderr)


def archspec_check(name: str, path: str, inputs: list, expected: list) -> None:
    """The check `build` runs: archspec's FRESH_RUN in a fresh process."""
    started = time.time()
    try:
        got = run_in_fresh_process(path, DEVICE, torch.get_num_threads(), [(x,) for x in inputs])
        gap = max((g[0] - e).abs().max().item() for g, e in zip(got, expected))
        say(f"  {name}.archspec: ran in {time.time() - started:.0f} s, max |package - eager on the GPU| {gap:.2e}")
    except Exception as failure:  # noqa: BLE001 - a probe: every outcome is printed
        say(f"  {name}.archspec: {type(failure).__name__} after {time.time() - started:.0f} s: {str(failure)[:300]}")


def in_process(name: str, path: str, inputs: list, expected: list) -> None:
    try:
        model = torch._inductor.aoti_load_package(path)
        with torch.no_grad():
            got = [model(x.to(DEVICE)).cpu() for x in inputs]
        gap = max((g - e).abs().max().item() for g, e in zip(got, expected))
        say(f"  {name}.in_process: ran, max |package - eager on the GPU| {gap:.2e}")
    except Exception as failure:  # noqa: BLE001
        say(f"  {name}.in_process: {type(failure).__name__}: {str(failure)[:300]}")


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    environment()
    variants = {"vit": FROZEN, "vit_embedded": {**FROZEN, "aot_inductor.embed_kernel_binary": True}, "linear": {}}
    if ONLY:
        variants = {ONLY: variants[ONLY]}
    loads, cases = [], {}
    for name, configs in variants.items():
        try:
            path, model, example = compile_variant(name, configs)
        except Exception as failure:  # noqa: BLE001
            say(f"{name}: compile failed: {type(failure).__name__}: {str(failure)[:300]}")
            continue
        inputs = [torch.randn(1, *example.shape[1:]), torch.randn(3, *example.shape[1:])]
        with torch.no_grad():
            expected = [model(x.to(DEVICE)).cpu() for x in inputs]
        saved = os.path.join(WORK, f"{name}.inputs.pt")
        torch.save(inputs, saved)
        cases[name] = (path, inputs, expected)
        loads += [start_load(name, kind, path, saved) for kind in ("plain", "libcuda", "inductor", "runner")]
    with ThreadPoolExecutor(len(cases) or 1) as pool:  # archspec's checks beside the loaders
        checks = [pool.submit(archspec_check, name, *case) for name, case in cases.items()]
        for load in loads:
            finish_load(load, cases[load["name"]][2])
        for check in checks:
            check.result()
    with open(os.path.join(OUT, "summary.txt"), "w") as f:
        f.write("\n".join(SUMMARY) + "\n")
    for name, (path, inputs, expected) in ({} if ONLY else cases).items():  # last: a crash here ends the probe
        in_process(name, path, inputs, expected)


if __name__ == "__main__":
    main()
