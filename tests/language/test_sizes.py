"""The size solver (archspec/sizes.py) and the hints it solves (pipeline.solve_hints): every input
size and param value a hint names passes `check` for the whole spec, on every shipped spec."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import archspec
from archspec.core.suggestions import Divides, Note
from archspec.language.compose import compose
from archspec.language.loader import load_file, load_text
from archspec.primitives.base import RuleError
from archspec.primitives.grids import grid_origin
from archspec.primitives.ops.attention import window
from archspec.sizes import SizeSolver, describe_sizes, find_knob

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "specs").glob("*.yaml")) + sorted((ROOT / "specs" / "examples").glob("*.yaml"))
IMAGE_SPECS = [p for p in SHIPPED if find_knob(compose(load_file(str(p))))]
WRONG_SIZES = [50, 225, 250, 300]
SIZES_IN_HINT = re.compile(r"an input of (\d+)(?: or (\d+))?")
VALUES_IN_HINT = re.compile(r"use an? (.+?) that divides \d+ and passes the whole spec \(([\d, ]+)\)")


def hints(path: Path, overrides: dict) -> list[str] | None:
    """The hints of a failed check, or None when the check passes."""
    try:
        archspec.check(str(path), overrides)
    except archspec.SpecError as exc:
        return [d.hint or "" for d in exc.diagnostics]
    return None


def passes(path: Path, overrides: dict) -> bool:
    return hints(path, overrides) is None


def suggested_sizes(texts: list[str]) -> list[int]:
    return [int(s) for text in texts for m in SIZES_IN_HINT.finditer(text) for s in m.groups() if s]


def test_every_shipped_image_spec_has_a_size_knob():
    names = {p.stem for p in IMAGE_SPECS}
    assert {"swin_t", "swin_b", "swinv2_t", "vit_b16", "pvt_v2_b0", "pvt_v1_tiny", "clip_vit_b32",
            "detector_backbone", "hybrid_pyramid", "simmim_swin_t"} <= names


@pytest.mark.parametrize("path", IMAGE_SPECS, ids=lambda p: p.stem)
def test_sizes_a_hint_names_pass_the_whole_spec(path):
    """Where a size fails, some hint names a size, and every size named passes. A spec at which
    every one of WRONG_SIZES passes (its patchify floors, its windows pad) has nothing to name."""
    knob = find_knob(compose(load_file(str(path))))
    named, failed = 0, []
    for size in WRONG_SIZES:
        found = hints(path, {knob.param: size})
        if found is None:
            continue
        failed.append(size)
        for suggestion in suggested_sizes(found):
            named += 1
            assert passes(path, {knob.param: suggestion}), f"{path.stem} at {size}: hint names {suggestion}: {found}"
    assert named or not failed, f"{path.stem} fails at {failed} and no hint names a size that passes"


SWIN_LIKE = ["swin_t", "swin_s", "swinv2_t", "simmim_swin_t"]


@pytest.mark.parametrize("name", SWIN_LIKE)
@pytest.mark.parametrize("window", [5, 6, 9])
def test_windows_a_hint_names_pass_the_whole_spec(name, window):
    path = ROOT / "specs" / f"{name}.yaml"
    found = hints(path, {"window": window})
    if found is None:
        return
    for text in found:
        for match in VALUES_IN_HINT.finditer(text):
            assert match[1] == "window"
            for value in map(int, match[2].split(", ")):
                assert passes(path, {"window": value}), f"{name}: hint names window {value}: {text}"
        for size in suggested_sizes([text]):
            assert passes(path, {"window": window, "img": size}), f"{name} window {window}: size {size}: {text}"


def test_the_issue_examples():
    swin = ROOT / "specs" / "swin_t.yaml"
    (hint,) = hints(swin, {"img": 256})
    assert hint.endswith("or an input of 224 or 448")
    (hint,) = hints(swin, {"window": 6})
    assert hint == "use a window that divides 56 and passes the whole spec (7, 14, 28) or an input of 192 or 384"
    (hint,) = hints(swin, {"img": 252})  # the old hint's size: the first merge fails there
    assert hint == "use an input of 224 or 448"


def test_pad_is_offered_only_where_the_whole_spec_then_passes(tmp_path):
    """'or set pad: true' is named when padding that attention's grid makes the whole spec pass
    (plain windows), and left out when a shifted window would still fail (Swin)."""
    bad = ROOT / "tests" / "bad_specs" / "window_does_not_divide_grid.yaml"
    (hint,) = hints(bad, {})
    assert hint.endswith("; or set pad: true to pad the grid to a multiple of 5 (as SAM and Twins do)")
    padded = tmp_path / "padded.yaml"
    padded.write_text(bad.read_text().replace('window: "${window}"}', 'window: "${window}", pad: true}'))
    assert "pad: true" in padded.read_text() and passes(padded, {})
    swin = ROOT / "specs" / "swin_t.yaml"
    (hint,) = hints(swin, {"img": 240})
    assert "pad" not in hint and hint == "use an input of 224 or 448: no window that divides 60 passes the whole spec"


@pytest.mark.parametrize("advice, expected", [
    (Divides("window side", 56, (14, 28), (2, 4, 7, 8, 14, 28)),
     "use a window side that divides 56 and passes the whole spec (7, 14, 28) or an input of 192 or 384"),
    (Note("windows must tile the tokens"), "windows must tile the tokens (an input of 192 or 384 would pass)"),
])
def test_the_solver_reads_a_rules_suggestion_not_its_words(monkeypatch, advice, expected):
    """A rule that words its problem its own way (no grid size in the message) still gets the
    whole-spec hints: the solver reads the structure the rule raised, not the text."""

    def misfit(p, grid, size, x):
        return RuleError("the windows leave tokens over", field="window", hint=advice, grid=grid_origin(x))

    monkeypatch.setattr(window, "window_misfit", misfit)
    (hint,) = hints(ROOT / "specs" / "swin_t.yaml", {"window": 6})
    assert hint == expected


def test_no_size_cures_an_unrelated_error():
    swin = ROOT / "specs" / "swin_t.yaml"
    (hint,) = hints(swin, {"heads": "[3, 6, 12, 25]"})
    assert "input" not in hint


def test_a_literal_input_size_is_solved_too():
    text = """
archspec: 1
name: literal
inputs:
  image: [B, 3, 36, 36]
graph:
  - patchify: {patch: 4, dim: 16}
  - merge: {kind: concat}
  - head: {kind: classify, classes: 2}
"""
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert info.value.hint == "use an input of 32 or 40"
    doc = compose(load_text(text))
    knob = find_knob(doc)
    assert knob.param is None and knob.size == 36
    assert SizeSolver(doc, knob).sizes(1, 48) == [8, 16, 24, 32, 40, 48]


def test_a_size_that_changes_the_graph_is_checked_by_expanding_again():
    text = """
archspec: 1
name: grows
params: {img: 64}
inputs:
  image: [B, 3, img, img]
graph:
  - patchify: {patch: 8, dim: 16}
  - id: merges
    repeat: ${img // 64}
    merge: {kind: concat}
  - head: {kind: classify, classes: 2}
"""
    doc = compose(load_text(text))
    solver = SizeSolver(doc, find_knob(doc))
    assert solver.graph is None and not solver.size_blind  # the IR depends on the size: no shortcut
    assert solver.sizes(1, 200) == [s for s in range(8, 201, 8) if (s // 8) % (2 ** (s // 64)) == 0]


def test_a_long_size_scan_says_how_far_it_got(monkeypatch):
    """--sizes calls its progress report every PROGRESS_SECONDS (here: after every size)."""
    import archspec.sizes as sizes

    monkeypatch.setattr(sizes, "PROGRESS_SECONDS", 0.0)
    doc = compose(load_file(str(ROOT / "specs" / "swin_t.yaml")))
    seen = []
    solver = SizeSolver(doc, find_knob(doc))
    assert solver.size_blind and solver.sizes(220, 226, lambda done, total: seen.append((done, total))) == [224]
    assert seen == [(n, 7) for n in range(1, 8)]


def test_describe_sizes():
    assert describe_sizes([224, 448, 672, 896], 1, 1024) == "224, 448, 672, 896 (every multiple of 224)"
    pvt = [s for s in range(1, 513) if (s - 1) % 32 >= 28]
    assert describe_sizes(pvt, 1, 512) == "29-32, 61-64, 93-96, 125-128, ..., 509-512 (repeating every 32)"
    assert describe_sizes([32, 64, 128], 1, 200) == "32, 64, 128"
    assert describe_sizes([], 1, 10) == "none"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "archspec", *args], capture_output=True, text=True, cwd=ROOT)


def test_check_sizes_lists_the_sizes_that_pass():
    done = run_cli("check", "specs/swin_t.yaml", "--sizes", "100:700")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("swin_t: square sizes of input 'image' from 100 to 700 that pass (--set img=N): "
                                   "224, 448, 672 (every multiple of 224)")
    done = run_cli("check", "specs/swinv2_t.yaml", "--sizes", "--json")
    assert json.loads(done.stdout)["sizes"] == [32, 64, 128, 256, 512, 768, 1024]


def test_check_sizes_usage_errors():
    assert run_cli("check", "specs/gpt2.yaml", "--sizes").returncode == 2
    done = run_cli("check", "specs/swin_t.yaml", "--sizes", "9:3")
    assert done.returncode == 2 and "MIN:MAX" in done.stderr and "Traceback" not in done.stderr


def test_check_sizes_with_an_error_no_size_cures():
    done = run_cli("check", "specs/swin_t.yaml", "--sizes", "200:300", "--set", "heads=[3,6,12,25]")
    assert done.returncode == 1
    assert "that pass (--set img=N): none" in done.stdout and "25 heads do not divide" in done.stderr


def test_the_readme_set_example_passes():
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"`(--set [^`]+)` overrides params", readme)[1]
    sets = dict(part.split("=", 1) for part in re.findall(r"--set (\S+)", example))
    assert passes(ROOT / "specs" / "swin_t.yaml", sets)


def test_an_image_whose_sides_are_written_apart_is_named_with_the_fix():
    """The MLCD and EfficientFormerV2 trials: [B, 3, img_h, img_w] with both ${img} (square in value)
    was told "has no square image input"."""
    from archspec.sizes import no_knob

    doc = compose(load_text("name: hw\nparams: {img: 32, img_h: '${img}', img_w: '${img}'}\n"
                            "inputs: {image: [B, 3, img_h, img_w]}\ngraph:\n  - {patchify: {patch: 8, dim: 16}}\n",
                            "hw.yaml"))
    assert find_knob(doc) is None
    assert no_knob(doc, "hw.yaml", "--sizes") == (
        "--sizes: the image input 'image' of hw.yaml is [B, 3, img_h, img_w]: its height and width are written "
        "apart, and --sizes varies one size for both sides: write them as one param (e.g. [B, 3, img, img])")
