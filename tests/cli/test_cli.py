"""The `archspec` command: exit codes (0 fine, 1 spec errors, 2 usage, 3 a bug in archspec), the
table and --json reports, --set, and that `check` never imports torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from archspec.cli import EXIT_BUG, EXIT_OK, EXIT_SPEC, EXIT_USAGE, main

ROOT = Path(__file__).resolve().parents[2]
SWIN = str(ROOT / "specs" / "swin_t.yaml")
VIT = str(ROOT / "specs" / "vit_b16.yaml")
BAD = str(ROOT / "tests" / "bad_specs" / "window_does_not_divide_grid.yaml")


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- exit codes ----------------------------------------------------------------------------------


def test_a_good_spec_exits_0(capsys):
    code, out, err = run(capsys, "check", SWIN)
    assert code == EXIT_OK == 0 and err == ""
    assert out.splitlines()[0] == "swin_t: image [B, 3, 224, 224] -> output [B, 1000]"


def test_a_bad_spec_exits_1(capsys):
    code, out, err = run(capsys, "check", BAD)
    assert code == EXIT_SPEC == 1 and out == ""
    assert "window 5 does not divide the 56x56 token grid" in err
    assert err.rstrip().endswith("1 error")


@pytest.mark.parametrize("argv, message", [
    (["check", "no/such/spec.yaml"], "archspec check: error: no such file: no/such/spec.yaml"),
    (["check", str(ROOT / "specs")], "is a directory; give a spec file"),
    (["check", SWIN, "--set", "img"], "archspec check: error: --set takes key=value, got 'img'"),
    (["check", SWIN, "--set", "=3"], "--set takes key=value, got '=3'"),
    (["check", SWIN, "--set", "2x=3"], "--set takes key=value, got '2x=3'"),
    (["check", SWIN, "--bogus"], "unrecognized arguments: --bogus"),
    (["check", SWIN, "--target", "onnx"], "invalid choice: 'onnx'"),
    (["check", SWIN, "--batch", "4"], "--batch goes with --target"),
    (["check"], "the following arguments are required: SPEC"),
    ([], "the following arguments are required: COMMAND"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_usage_errors_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == EXIT_USAGE == 2
    assert message in err and "Traceback" not in err


def test_help_exits_0(capsys):
    code, out, _ = run(capsys, "check", "--help")
    assert code == 0 and "--set KEY=VALUE" in out


def test_a_bug_in_archspec_exits_3_and_says_so(capsys, monkeypatch):
    import archspec.cli.commands.check

    def broken(*args, **kwargs):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(archspec.cli.commands.check, "check_file", broken)
    code, out, err = run(capsys, "check", SWIN)
    assert code == EXIT_BUG == 3
    assert "Traceback" in err and "This is a bug in archspec, not a problem with your spec" in err


# -- reports -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, params", [(SWIN, 28_288_354), (VIT, 86_567_656)])
def test_exact_parameter_counts(capsys, path, params):
    code, out, _ = run(capsys, "check", path)
    assert code == 0
    assert out.splitlines()[-1].startswith(f"total: {params:,} params, ")
    code, out, _ = run(capsys, "check", path, "--json")
    assert code == 0 and json.loads(out)["params"] == params


def test_json_report(capsys):
    code, out, _ = run(capsys, "check", VIT, "--json")
    report = json.loads(out)
    assert {"name", "inputs", "outputs", "params", "flops", "nodes"} <= set(report)
    assert report["name"] == "vit_b16"
    assert report["inputs"] == {"image": ["B", 3, 224, 224]} and report["outputs"] == {"output": ["B", 1000]}
    assert len(report["nodes"]) == 1 + 12 * 2 + 2
    for record in report["nodes"]:
        assert {"path", "op", "shape", "params", "flops"} <= set(record)
        assert isinstance(record["params"], int) and isinstance(record["flops"], int)
    first = report["nodes"][0]
    assert (first["path"], first["op"], first["shape"]) == ("patch_embed", "patchify", ["B", 197, 768])
    assert sum(r["params"] for r in report["nodes"]) == report["params"]
    assert sum(r["flops"] for r in report["nodes"]) == report["flops"]
    assert report["nodes"][1]["path"] == "blocks.0.attn" and report["nodes"][1]["kind"] == "global"


def test_json_errors(capsys):
    code, out, err = run(capsys, "check", BAD, "--json")
    assert code == 1 and err == ""
    (record,) = json.loads(out)["errors"]
    assert record == {
        "severity": "error", "file": BAD, "line": 23, "col": 57, "path": "stages.0.blocks.attn",
        "message": "window 5 does not divide the 56x56 token grid (image 224 / patch 4)",
        "hint": "use a window that divides 56 and passes the whole spec (2, 4, 7, 14, 28) or an input of 200 or 240; "
                "or set pad: true to pad the grid to a multiple of 5 (as SAM and Twins do)"}


def test_errors_quote_the_line_with_a_caret(capsys):
    _, _, err = run(capsys, "check", SWIN, "--set", "img=240")
    lines = err.splitlines()
    assert lines[0] == (f"{SWIN}:34:19: error: stages.0.blocks.0.attn: window 7 does not divide the 60x60 token "
                        "grid (image 240 / patch 4)")
    assert lines[1] == " 34 |           window: ${window}"
    assert lines[2] == "    |                   ^"
    assert lines[3] == "  hint: use an input of 224 or 448: no window that divides 60 passes the whole spec"


# -- --set -----------------------------------------------------------------------------------------


def test_set_changes_the_model(capsys):
    code, out, _ = run(capsys, "check", SWIN, "--json", "--set", "img=448", "--set", "classes=10")
    report = json.loads(out)
    assert code == 0 and report["inputs"]["image"] == ["B", 3, 448, 448] and report["outputs"]["output"] == ["B", 10]
    assert report["params"] == 28_288_354 - 990 * 769  # the head: 769 * 1000 -> 769 * 10 weights and biases


def test_set_a_list(capsys):
    code, out, _ = run(capsys, "check", SWIN, "--json", "--set", "depths=[2, 2, 18, 2]")
    assert code == 0 and json.loads(out)["params"] == 49_606_258  # timm's swin_small


def test_set_an_unknown_param(capsys):
    code, _, err = run(capsys, "check", SWIN, "--set", "img=256", "--set", "windw=8")
    assert code == 1
    assert err.splitlines()[:4] == ["<command line>:2:1: error: --set: unknown parameter 'windw'", " 2 | windw=8",
                                    "   | ^", "  hint: did you mean 'window'?"]


def test_set_a_bad_value_quotes_the_command_line(capsys):
    code, _, err = run(capsys, "check", SWIN, "--set", "depths=[2, 2")
    assert code == 1
    assert err.splitlines()[1] == " 1 | depths=[2, 2"


# -- real processes ------------------------------------------------------------------------------


def subprocess_env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


def test_check_imports_no_torch():
    code = ("import sys\n"
            "from archspec.cli import main\n"
            f"assert main(['check', {SWIN!r}, '--json']) == 0\n"
            f"assert main(['check', {BAD!r}]) == 1\n"
            "import archspec\n"
            f"archspec.check({VIT!r})\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'torch')\n"
            "print('IMPORTED', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=subprocess_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "IMPORTED []"


@pytest.mark.parametrize("argv, code", [(["check", SWIN], 0), (["check", BAD], 1), (["check", "missing.yaml"], 2),
                                        (["check", SWIN, "--nope"], 2), (["schema"], 0)])
def test_python_dash_m(argv, code):
    proc = subprocess.run([sys.executable, "-m", "archspec", *argv], capture_output=True, text=True, timeout=120,
                          env=subprocess_env(), cwd=ROOT)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(shutil.which("archspec") is None, reason="the console script is not installed")
def test_console_script():
    proc = subprocess.run(["archspec", "check", VIT], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and "total: 86,567,656 params" in proc.stdout


def test_a_closed_pipe_is_not_a_bug():
    """`archspec check spec.yaml --json | head`: the reader leaves early; no traceback, no 'bug' message."""
    proc = subprocess.Popen([sys.executable, "-m", "archspec", "check", VIT, "--json", "--set", "depth=400"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(), cwd=ROOT)
    proc.stdout.close()  # a 300 KB report does not fit the pipe: writing it fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "bug" not in err


def test_set_takes_several_values_after_one_flag(capsys):
    vit = str(ROOT / "specs" / "vit_ti16.yaml")
    for argv in (["check", vit, "--set", "img=64", "depth=2", "--set", "classes=10"],
                 ["check", "--set", "img=64", "depth=2", "classes=10", vit]):  # SPEC after the values too
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "image [B, 3, 64, 64]" in out and "blocks.1" in out and "blocks.2" not in out and "[B, 10]" in out


def test_one_value_per_set():
    from archspec.cli.main import one_value_per_set

    assert one_value_per_set(["check", "s.yaml", "--set", "a=1", "b=[2, 3]", "--json"]) == \
        ["check", "s.yaml", "--set", "a=1", "--set", "b=[2, 3]", "--json"]
    assert one_value_per_set(["check", "--set", "a=1", "s.yaml", "c=d"]) == ["check", "--set", "a=1", "s.yaml", "c=d"]
    assert one_value_per_set(["check", "s.yaml", "--set", "oops"]) == ["check", "s.yaml", "--set", "oops"]
