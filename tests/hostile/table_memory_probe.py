"""Run alone (python -m tests.hostile.table_memory_probe): for each spec below, build it and print
one JSON line with what check estimated the build needs and what the build's peak really was
(VmHWM after resetting it through /proc/self/clear_refs, less the resident memory before).
tests/hostile/test_table_memory.py reads the lines; a process of its own keeps other tests'
memory out of the peaks."""

from __future__ import annotations

import gc
import json
import sys

GRID = 64  # relative_lookup: a [4096, 4096] int64 index, 134 MB
TABLE_GRID = 48  # relative_table with a class token: [2305, 2305] int64, 42 MB
EYE = 4096  # constant eye [4096, 4096] float32, 67 MB (and fill: index [2, 4096, 4096], 134 MB)

CASES = {
    "relative_lookup": f"""\
name: lookup
inputs:
  x: [B, 4, 8]
graph:
  - {{id: table, param: {{shape: [2, {(2 * GRID - 1) ** 2}]}}}}
  - {{id: bias, from: table, relative_lookup: {{grid: {GRID}}}}}
outputs: [bias]
""",
    "relative_lookup_absolute": f"""\
name: lookup_absolute
inputs:
  x: [B, 4, 8]
graph:
  - {{id: table, param: {{shape: [2, {GRID * GRID}]}}}}
  - {{id: bias, from: table, relative_lookup: {{grid: {GRID}, offsets: absolute}}}}
outputs: [bias]
""",
    "relative_table": f"""\
name: table
inputs:
  image: [B, 3, {TABLE_GRID * 2}, {TABLE_GRID * 2}]
graph:
  - {{id: patch, patchify: {{patch: 2, dim: 8, cls_token: true, pos: none}}}}
  - {{id: attn, attention: {{kind: global, heads: 1, scores: [relative_table]}}}}
""",
    "constant_eye": f"""\
name: eye
inputs:
  x: [B, 4, 8]
graph:
  - {{id: eye, constant: {{shape: [{EYE}, {EYE}], fill: eye}}}}
outputs: [eye]
""",
    "constant_index": f"""\
name: index
inputs:
  x: [B, 4, 8]
graph:
  - {{id: at, constant: {{shape: [2, {EYE}, {EYE}], fill: index, along: 2}}}}
outputs: [at]
""",
}


def resident() -> int:
    return status("VmRSS")


def status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(key)


def main(names) -> None:
    import archspec
    from archspec.budget import needed_bytes

    archspec.build_text(CASES["constant_eye"].replace(str(EYE), "4"))  # imports and first-use costs
    for name in names:
        text = CASES[name]
        estimate = needed_bytes(archspec.check_text(text), runs_model=False)
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM back to the resident size
        before = resident()
        model = archspec.build_text(text)
        peak = status("VmHWM") - before
        del model
        gc.collect()
        print(json.dumps({"case": name, "estimate": estimate, "peak": peak}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
