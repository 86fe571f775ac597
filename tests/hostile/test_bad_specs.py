"""The corpus of bad specs: each file in tests/bad_specs/ carries, in its comment header, every
diagnostic `archspec check` must give for it, exactly:

    # args: --set img=30                       (optional: command-line arguments)
    # expect: FILE:LINE:COL: error: PATH: MESSAGE
    # hint: HINT                               (optional: the hint of the diagnostic above)

FILE is the file's base name (or `<command line>` for a `--set` problem). Each spec is checked
through the Python API (archspec.check raising SpecError) and through the CLI (`python -m archspec
check FILE`, plain and --json): exit code 1, the diagnostics in order, and never a traceback.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import archspec
from archspec.language.compose import parse_override

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parents[1] / "bad_specs"
SPECS = sorted(CORPUS.glob("*.yaml"))


@dataclass(frozen=True)
class Expected:
    headline: str
    hint: str | None


def header(path: Path) -> tuple[list[str], list[Expected]]:
    """(command-line arguments, expected diagnostics) from a spec's leading comments."""
    args: list[str] = []
    expected: list[Expected] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("# args: "):
            args = shlex.split(line[len("# args: "):])
        elif line.startswith("# expect: "):
            expected.append(Expected(line[len("# expect: "):], None))
        elif line.startswith("# hint: "):
            assert expected, f"{path.name}: a hint before any expect"
            expected[-1] = replace(expected[-1], hint=line[len("# hint: "):])
    return args, expected


def overrides_of(args: list[str]) -> dict[str, str]:
    out = {}
    for flag, value in zip(args, args[1:]):
        if flag == "--set":
            key, text = parse_override(value)
            out[key] = text
    return out


def as_seen(diag) -> Expected:
    """A diagnostic as the header writes it: the file by its base name."""
    if diag.loc is not None:
        diag = replace(diag, loc=replace(diag.loc, file=os.path.basename(diag.loc.file)))
    return Expected(diag.headline(), diag.hint)


def ids(path: Path) -> str:
    return path.stem


# -- the corpus itself ---------------------------------------------------------------------------


def test_corpus_is_large_enough():
    assert len(SPECS) >= 35
    for path in SPECS:
        _, expected = header(path)
        assert expected, f"{path.name} has no '# expect:' line"


@pytest.mark.parametrize("path", SPECS, ids=ids)
def test_locations_point_at_the_text(path):
    """Every expected file:line:col lies on a key or value of the named file, not on blank space."""
    _, expected = header(path)
    for exp in expected:
        where = exp.headline.split(": error: ")[0]
        file, line, col = where.rsplit(":", 2)
        assert file == "<command line>" or (CORPUS / file).is_file(), exp.headline
        if file == "<command line>":
            continue
        lines = (CORPUS / file).read_text(encoding="utf-8").splitlines()
        line, col = int(line), int(col)
        assert 1 <= line <= len(lines), exp.headline
        text = lines[line - 1]
        if "the spec is empty" in exp.headline:
            continue
        assert 1 <= col <= len(text) and not text[col - 1] == " ", f"{exp.headline} -> {text!r}"


# -- the Python API --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SPECS, ids=ids)
def test_api_diagnostics(path):
    args, expected = header(path)
    with pytest.raises(archspec.SpecError) as info:
        archspec.check(str(path), overrides_of(args) or None)
    got = [as_seen(d) for d in info.value.diagnostics]
    assert got == expected


# -- the command line ------------------------------------------------------------------------------

# One interpreter runs `python -m archspec check` (archspec/__main__.py, via runpy) for every spec,
# plain and with --json, and reports exit codes and output: the CLI's behaviour without paying
# for 2 x N interpreter start-ups. test_cli_in_a_fresh_process runs a few in real processes.
DRIVER = r"""
import contextlib, io, json, runpy, sys, traceback
results = {}
for name, args in json.loads(sys.argv[1]):
    for mode in ("text", "json"):
        argv = ["archspec", "check", name, *args] + (["--json"] if mode == "json" else [])
        out, err = io.StringIO(), io.StringIO()
        code = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            sys.argv = argv
            try:
                runpy.run_module("archspec", run_name="__main__", alter_sys=True)
            except SystemExit as exc:
                code = exc.code
            except BaseException:
                traceback.print_exc()
                code = "escaped"
        results[f"{name} {mode}"] = {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def cli_results() -> dict:
    jobs = [(path.name, header(path)[0]) for path in SPECS]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(jobs)], cwd=CORPUS, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def record_headline(record: dict) -> str:
    node = f"{record['path']}: " if record["path"] else ""
    return f"{record['file']}:{record['line']}:{record['col']}: error: {node}{record['message']}"


@pytest.mark.parametrize("path", SPECS, ids=ids)
def test_cli_text(path, cli_results):
    _, expected = header(path)
    result = cli_results[f"{path.name} text"]
    assert "Traceback" not in result["stderr"] and "bug in archspec" not in result["stderr"], result["stderr"]
    assert result["code"] == 1, result
    assert result["stdout"] == ""
    lines = result["stderr"].splitlines()
    headlines = [line for line in lines if ": error: " in line and not line.startswith(" ")]
    assert headlines == [e.headline for e in expected]
    hints = [line[len("  hint: "):] for line in lines if line.startswith("  hint: ")]
    assert hints == [e.hint for e in expected if e.hint]
    count = len(expected)
    assert lines[-1] == f"{count} error{'s' if count != 1 else ''}"


@pytest.mark.parametrize("path", SPECS, ids=ids)
def test_cli_json(path, cli_results):
    _, expected = header(path)
    result = cli_results[f"{path.name} json"]
    assert "Traceback" not in result["stderr"], result["stderr"]
    assert result["code"] == 1, result
    records = json.loads(result["stdout"])["errors"]
    for record in records:
        assert set(record) == {"severity", "file", "line", "col", "path", "message", "hint"}
        assert isinstance(record["file"], str) and isinstance(record["message"], str)
        assert isinstance(record["line"], int) and isinstance(record["col"], int)
    got = [Expected(record_headline(r), r["hint"]) for r in records]
    assert got == expected


@pytest.mark.parametrize("name", ["yaml_unquoted_expression_in_flow_mapping.yaml", "expr_eval_like_calls.yaml",
                                  "window_does_not_divide_grid.yaml", "set_unknown_param.yaml"])
def test_cli_in_a_fresh_process(name):
    """The real thing, for a few specs: `python -m archspec check FILE` in its own process."""
    args, expected = header(CORPUS / name)
    for extra in ([], ["--json"]):
        proc = subprocess.run([sys.executable, "-m", "archspec", "check", name, *args, *extra], cwd=CORPUS,
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert proc.returncode == 1
        assert "Traceback" not in proc.stderr
        if extra:
            records = json.loads(proc.stdout)["errors"]
            assert [Expected(record_headline(r), r["hint"]) for r in records] == expected
        else:
            assert [line for line in proc.stderr.splitlines() if ": error: " in line and line[0] != " "] == \
                [e.headline for e in expected]
