"""Run the fuzz job: a worker process runs the cases and reports each; this process watches it.

    python -m tests.fuzz.run --cases 200000 --out fuzz.json      # the long run
    python -m tests.fuzz.run --replay 1:12345                    # one case again, in process

The counts:
  crashes   outcomes starting with `crash` (a traceback, exit 3, an unexpected exception), and a
            worker that died (a segfault, or killed by the system)
  hangs     cases over HANG_SECONDS of CPU time (the worker's own, one torch thread: on a machine
            shared with other jobs the wall clock measures them too; the wall time is reported
            beside), confirmed by running each again alone in a fresh worker; a case the watchdog
            had to kill (over WATCHDOG_SECONDS of wall time: a wait burns no CPU) counts at once
  memory    cases whose process peaked over MEMORY_BYTES (the peak is reset before each case:
            /proc/self/clear_refs), confirmed alone as well; a worker over KILL_BYTES is killed
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HANG_SECONDS = 2.0
WATCHDOG_SECONDS = 20.0
MEMORY_BYTES = 1 << 30
KILL_BYTES = 3 << 30
BUILD_BUDGET = str(64 << 20)  # ARCHSPEC_MAX_BUILD_BYTES in the worker: bigger builds (8M params) are refused
ROOT = Path(__file__).resolve().parents[2]


# -- the worker's side --------------------------------------------------------------------------------


def workspace(scratch: str) -> tuple[str, dict[str, str]]:
    """A folder inside `scratch` (the watcher's, which removes it: a worker may be killed) with a
    copy of specs/ (extends and mappings resolve in it) and the odd files the command lines name;
    returns (folder, role -> path)."""
    import torch

    root = tempfile.mkdtemp(prefix="worker-", dir=scratch)
    specs = os.path.join(root, "specs")
    shutil.copytree(ROOT / "specs", specs)
    fixtures = os.path.join(root, "fixtures")
    os.makedirs(fixtures)
    files = {"dir": fixtures, "file": os.path.join(fixtures, "plain.txt"), "fifo": os.path.join(fixtures, "fifo")}
    Path(files["file"]).write_text("not yaml: [\n")
    os.mkfifo(files["fifo"])
    from . import seeds

    for name in ("vit_b16.yaml", "swin_t.yaml", "tiny_lm.yaml"):
        files[f"spec_{name}"] = os.path.join(specs, "examples" if name == "tiny_lm.yaml" else "", name)
    for name, text in seeds.TINY.items():
        files[f"tiny_{name}"] = os.path.join(fixtures, f"{name}.yaml")
        Path(files[f"tiny_{name}"]).write_text(text)
    for name in ("bad_a", "bad_b"):
        files[f"spec_{name}"] = os.path.join(fixtures, f"{name}.yaml")
    Path(files["spec_bad_a"]).write_text(seeds.bad()["param_cycle.yaml"])
    Path(files["spec_bad_b"]).write_text(seeds.bad()["window_does_not_divide_grid.yaml"])
    files.update({"special_fifo": files["fifo"], "special_dir": fixtures, "special_null": "/dev/null",
                  "special_binary": os.path.join(fixtures, "binary.yaml")})
    Path(files["special_binary"]).write_bytes(bytes(range(256)) * 8)
    files["garbage_map"] = os.path.join(fixtures, "map.yaml")
    Path(files["garbage_map"]).write_text("rules: [{rename: ['(', 'x']}]\nidentify: 3\n")
    checkpoints(fixtures, files, torch)
    for role, path in {"out_new": "out/new", "out_nested": "out/a/b/c", "out_file": files["file"],
                       "out_proc": "/proc/archspec-fuzz", "out_dev": "/dev/null/x", "out_fixtures": fixtures,
                       "out_dot": ".", "out_root": "/", "out_long": "o" * 300}.items():
        files[role] = path
    return specs, files


def checkpoints(folder: str, files: dict, torch) -> None:
    """Malformed and odd checkpoints, and one that fits tiny_vit."""
    import archspec
    from . import seeds

    state = archspec.build_text(seeds.TINY["tiny_vit"]).state_dict()
    made = {"good.pt": state, "bare.pt": torch.zeros(3), "list.pt": [torch.zeros(3)],
            "intkeys.pt": {1: torch.zeros(3)},
            "nan.pt": {k: torch.full_like(v, float("nan")) for k, v in state.items()},
            "int.pt": {k: v.to(torch.int64) for k, v in state.items()}, "nested.pt": {"a": {"b": 1}},
            "wrapped.pt": {"state_dict": state}, "half.pt": {k: v.half() for k, v in state.items()}}
    for name, value in made.items():
        torch.save(value, os.path.join(folder, name))
    Path(folder, "empty.pth").write_bytes(b"")
    Path(folder, "garbage.pt").write_bytes(b"PK\x03\x04" + b"\xff" * 200)
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(folder, "good.safetensors"))
    data = Path(folder, "good.safetensors").read_bytes()
    Path(folder, "truncated.safetensors").write_bytes(data[: len(data) // 2])
    Path(folder, "header.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    torch.save({seeds.timm_name(k): v for k, v in state.items()}, os.path.join(folder, "timm_vit.pt"))
    for name in list(made) + ["timm_vit.pt", "empty.pth", "garbage.pt", "good.safetensors", "truncated.safetensors",
                              "header.safetensors"]:
        files[f"ckpt_{name}"] = os.path.join(folder, name)
    files["ckpt_fifo"], files["ckpt_dir"], files["ckpt_missing"] = files["fifo"], folder, "missing.pt"


def peak_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def clean(folder: str, keep: set[str]) -> None:
    """Remove what a case wrote into the workspace (builds, outputs, spec files)."""
    for name in os.listdir(folder):
        if name not in keep:
            path = os.path.join(folder, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) and not os.path.islink(path) else \
                os.remove(path)


def warm_up() -> None:
    """Check the seed specs once, and one with an error, before any case is timed: a case run
    first in a fresh worker (as every confirmation is) would otherwise carry the lazy imports and
    first-use costs of the whole checker in its time."""
    import archspec
    from archspec.core.errors import SpecError

    from . import seeds

    for text in seeds.TINY.values():
        archspec.check_text(text)
    try:
        archspec.check_text(seeds.TINY["tiny_vit"].replace("heads:", "haeds:"))
    except SpecError:
        pass


def worker(seed: int, indices, scratch: str) -> None:
    report = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the code under test prints at the C level goes nowhere
    os.environ.setdefault("ARCHSPEC_MAX_BUILD_BYTES", BUILD_BUDGET)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the worker
    from . import cases

    specs, files = workspace(scratch)
    os.chdir(specs)
    keep = set(os.listdir(specs))
    import archspec.compiler.lower  # noqa: F401 - warm: the first build must not look like a hang
    import torch

    torch.set_num_threads(1)  # the CPU time of a case is then about its wall time on an idle machine

    warm_up()
    for index in indices:
        case = cases.make_case(seed, index, files)
        peak_reset()
        began, cpu = time.perf_counter(), time.process_time()
        outcome = cases.run_case(case)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        peak = peak_bytes()
        clean(specs, keep)
        report.write(json.dumps({"index": index, "kind": case.kind, "outcome": outcome, "wall": round(wall, 4),
                                 "cpu": round(cpu, 4), "peak": peak, "mutations": case.mutations}) + "\n")


# -- the watching side --------------------------------------------------------------------------------


class Watch:
    """Runs cases [start, stop) in workers, restarting one that hangs or dies."""

    def __init__(self, seed: int, log=None):
        self.seed, self.log = seed, log
        self.results: list[dict] = []
        self.killed: list[dict] = []  # cases the watchdog killed, or whose worker died

    def run(self, indices: list[int]) -> list[dict]:
        """Run the cases `indices` (in order), a worker at a time, in a scratch folder removed after."""
        position = 0
        with tempfile.TemporaryDirectory(prefix="archspec-fuzz-", ignore_cleanup_errors=True) as scratch:
            while position < len(indices):
                position = self.run_worker(indices, position, scratch)
        return self.results

    def run_worker(self, indices: list[int], position: int, scratch: str) -> int:
        """Run indices[position:] in one worker; the position to go on from when it stops."""
        env = dict(os.environ, PYTHONPATH=str(ROOT), ARCHSPEC_MAX_BUILD_BYTES=BUILD_BUDGET)
        todo = indices[position:]
        span = ["--start", str(todo[0]), "--stop", str(todo[-1] + 1)] if todo == list(range(todo[0], todo[-1] + 1)) \
            else ["--indices", ",".join(map(str, todo))]
        proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.run", "--worker", "--seed", str(self.seed),
                                 "--scratch", scratch, *span],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        waited, buffer, first = 0.0, "", True
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 1 << 16).decode("utf-8", "replace")
                if not chunk:
                    code = proc.wait()
                    if position < len(indices):
                        self.lost(indices[position], f"crash: worker died (exit {code})")
                        return position + 1
                    return position
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    self.results.append(json.loads(line))
                    position, waited, first = position + 1, 0.0, False
                    if self.log and len(self.results) % 1000 == 0:
                        self.log(self.results)
                continue
            waited += 0.5
            if rss(proc.pid) > KILL_BYTES:
                self.kill(proc)
                self.lost(indices[position], "memory: worker over the kill limit")
                return position + 1
            if waited > WATCHDOG_SECONDS * (6 if first else 1):  # the first case also waits for the imports
                self.kill(proc)
                self.lost(indices[position], f"hang: killed after {WATCHDOG_SECONDS:.0f} s")
                return position + 1

    def lost(self, index: int, outcome: str) -> None:
        result = {"index": index, "kind": "?", "outcome": outcome, "wall": None, "cpu": None, "peak": None,
              "mutations": []}
        self.results.append(result)
        self.killed.append(result)

    @staticmethod
    def kill(proc) -> None:
        proc.kill()
        proc.wait()


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def confirm(seed: int, results: list[dict], tries: int = 3) -> tuple[list[dict], list[dict]]:
    """Run each slow, killed or heavy case again, alone in a fresh worker, up to `tries` times:
    a hang is a case over HANG_SECONDS every time (one slow run on a shared machine may be
    another process's doing), a memory blow-up one over MEMORY_BYTES every time. Returns
    (hangs, memory blow-ups), each with its fastest (lightest) run."""
    suspects = {r["index"]: r for r in results if r["outcome"].startswith(("hang", "memory")) or
                (r["wall"] is not None and (case_seconds(r) > HANG_SECONDS or r["peak"] > MEMORY_BYTES))}
    best: dict[int, list[dict]] = {index: [] for index in suspects}
    for _ in range(tries):
        todo = [i for i, runs in best.items() if not runs or all(slow(r) or heavy(r) for r in runs)]
        if not todo:
            break
        for again in Watch(seed).run(todo):
            best[again["index"]].append(again)
    hangs = [min(runs, key=lambda r: case_seconds(r) if r["wall"] is not None else float("inf"))
             for runs in best.values() if all(slow(r) for r in runs)]
    memory = [min(runs, key=lambda r: r["peak"] or float("inf")) for runs in best.values()
              if all(heavy(r) for r in runs)]
    return hangs, memory


def case_seconds(result: dict) -> float:
    """What a hang is judged by: the case's CPU time (its wall time in a run from before it was kept)."""
    return result["cpu"] if result.get("cpu") is not None else result["wall"]


def slow(result: dict) -> bool:
    return result["outcome"].startswith("hang") or (result["wall"] is not None and case_seconds(result) > HANG_SECONDS)


def heavy(result: dict) -> bool:
    return result["outcome"].startswith("memory") or (result["peak"] is not None and result["peak"] > MEMORY_BYTES)


def summary(seed: int, results: list[dict], hangs: list[dict], memory: list[dict], seconds: float) -> dict:
    from . import cases, mutators

    crashes = [r for r in results if r["outcome"].startswith("crash")]
    slow = sorted((r for r in results if r["wall"] is not None), key=lambda r: -case_seconds(r))[:5]
    return {
        "seed": seed, "cases": len(results), "seconds": round(seconds),
        "crashes": len(crashes), "hangs_over_2s": len(hangs), "memory_over_1GB": len(memory),
        "kinds": dict(Counter(r["kind"] for r in results)),
        "outcomes": dict(Counter(r["outcome"].split(":")[0] for r in results)),
        "outcomes_by_kind": {kind: dict(Counter(r["outcome"].split(":")[0] for r in results if r["kind"] == kind))
                             for kind in sorted({r["kind"] for r in results})},
        "mutators": {name: sum(name in r["mutations"] for r in results) for name in mutators.SPEC_MUTATORS},
        "case_kinds": cases.KINDS,
        "peak_bytes": max((r["peak"] for r in results if r["peak"]), default=0),
        "slowest": [{"case": f"{seed}:{r['index']}", "cpu": r.get("cpu"), "wall": r["wall"], "kind": r["kind"]}
                    for r in slow],
        "over_2s_before_confirming": sum(1 for r in results
                                         if r["wall"] is not None and case_seconds(r) > HANG_SECONDS),
        "wall_over_2s": sum(1 for r in results if r["wall"] is not None and r["wall"] > HANG_SECONDS),
        "crash_list": [{"case": f"{seed}:{r['index']}", "outcome": r["outcome"]} for r in crashes[:100]],
        "hang_list": [{"case": f"{seed}:{r['index']}", "outcome": r["outcome"], "cpu": r.get("cpu"), "wall": r["wall"]}
                      for r in hangs],
        "memory_list": [{"case": f"{seed}:{r['index']}", "peak": r["peak"]} for r in memory],
    }


def replay(key: str) -> None:
    """Run one case in this process and show everything about it."""
    from . import cases

    seed, index = (int(part) for part in key.split(":"))
    os.environ.setdefault("ARCHSPEC_MAX_BUILD_BYTES", BUILD_BUDGET)  # as in the worker
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="archspec-fuzz-", ignore_cleanup_errors=True) as scratch:
        specs, files = workspace(scratch)
        os.chdir(specs)
        try:
            case = cases.make_case(seed, index, files)
            print(f"kind {case.kind}; seed spec {case.seed_spec}; mutations {case.mutations}; argv {case.argv}; "
                  f"call {case.call}; overrides {case.overrides}")
            if case.text:
                print("----\n" + case.text[:4000] + "\n----")
            os.environ["ARCHSPEC_DEBUG"] = "1"
            began = time.perf_counter()
            print(cases.run_case(case), f"{time.perf_counter() - began:.2f} s", f"peak {peak_bytes() >> 20} MiB")
        finally:
            os.chdir(here)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="write the summary (JSON) here")
    parser.add_argument("--replay", metavar="SEED:INDEX")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--indices", default="", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        indices = [int(i) for i in args.indices.split(",")] if args.indices else range(args.start, args.stop)
        worker(args.seed, indices, args.scratch)
        return 0
    if args.replay:
        replay(args.replay)
        return 0
    began = time.perf_counter()

    def progress(results):
        bad = sum(r["outcome"].startswith(("crash", "hang", "memory")) for r in results)
        print(f"{len(results)} cases, {time.perf_counter() - began:.0f} s, {bad} crash/hang/memory so far",
              file=sys.stderr, flush=True)
        if args.out:
            Path(args.out + ".partial").write_text(json.dumps(summary(args.seed, results, [], [], 0), indent=1))

    results = Watch(args.seed, progress).run(list(range(args.cases)))
    hangs, memory = confirm(args.seed, results)
    result = summary(args.seed, results, hangs, memory, time.perf_counter() - began)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 1 if result["crashes"] or result["hangs_over_2s"] or result["memory_over_1GB"] else 0


if __name__ == "__main__":
    sys.exit(main())
