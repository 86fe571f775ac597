"""The build folder (archspec/cli/artifacts.py): builds that really race into one folder, builds
really interrupted by SIGINT and SIGTERM, rebuilds that leave exactly their own artifacts and
never delete what archspec did not write, what report.json and model.py record, and the
output folders `-o` cannot be."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from archspec.cli import artifacts

from .conftest import ROOT

TINY = """archspec: 1
name: tiny
params:
  dim: 32
inputs:
  x: [B, 8, 16]
graph:
  - id: attn
    attention: {kind: global, heads: 2}
  - id: mlp
    mlp: {hidden: "${dim}"}
"""


def build_command(spec: Path, out: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "archspec", "build", str(spec), "-o", str(out), *flags]


def build(spec: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(build_command(spec, out, *flags), capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".archspec-" in p.name]


def assert_one_complete_build(folder: Path) -> dict:
    """The folder holds exactly the files its manifest lists, each of the recorded size."""
    manifest = json.loads((folder / artifacts.MANIFEST).read_text())
    names = {p.name for p in folder.iterdir()} - {artifacts.MANIFEST}
    assert names == set(manifest["files"]), (names, manifest["files"])
    for name, record in manifest["files"].items():
        assert (folder / name).stat().st_size == record["bytes"], name
    return manifest


# -- rebuilds ------------------------------------------------------------------------------------------


def test_a_rebuild_leaves_exactly_its_own_artifacts_and_keeps_what_is_not_archspecs(spec, tmp_path):
    out = tmp_path / "out"
    assert build(spec, out, "--target", "onnx").returncode == 0
    assert {"model.onnx", "model.pt2", "manifest.json"} <= {p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("mine")
    (out / "plots").mkdir()
    (out / "plots" / "loss.png").write_bytes(b"\x89PNG")
    with open(out / "model.py", "a") as f:  # the user edits a generated file
        f.write("# my change\n")
    edited = (out / "model.py").read_text()

    result = build(spec, out, "--target", "eager", "--set", "dim=48")
    assert result.returncode == 0, result.stderr
    names = {p.name for p in out.iterdir()}
    assert names == {"report.json", "report.html", "model.py", "weights.pt", "manifest.json", "notes.txt", "plots",
                     "model.py.edited"}, names  # model.onnx and model.pt2 of the first build are gone
    assert (out / "notes.txt").read_text() == "mine" and (out / "plots" / "loss.png").read_bytes() == b"\x89PNG"
    assert (out / "model.py.edited").read_text() == edited
    assert "kept your model.py as model.py.edited" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {"report.json", "report.html", "model.py", "weights.pt"}
    assert leftovers(tmp_path) == []


def test_report_and_model_py_record_the_spec_its_hash_the_overrides_and_the_versions(spec, tmp_path):
    import archspec

    out = tmp_path / "out"
    result = build(spec, out, "--target", "eager", "--set", "dim=48", "--seed", "7")
    assert result.returncode == 0, result.stderr
    info = json.loads((out / "report.json").read_text())["build"]
    assert info["spec"] == str(spec) and info["spec_file"] == str(spec.resolve())
    assert info["spec_sha256"] == hashlib.sha256(spec.read_bytes()).hexdigest()
    assert info["overrides"] == {"dim": "48"} and info["seed"] == 7 and info["target"] == "eager"
    assert info["archspec"] == archspec.__version__ and info["torch"] == torch.__version__
    source = (out / "model.py").read_text()
    assert source.startswith(f"# Built by archspec {archspec.__version__} with torch {torch.__version__}\n")
    assert f"(sha256 {info['spec_sha256']})" in source and "# overrides: --set dim=48" in source
    namespace: dict = {}
    exec(compile(source, "model.py", "exec"), namespace)  # noqa: S102 - our own output
    assert namespace["ARCHSPEC_BUILD"] == info
    assert json.loads((out / "manifest.json").read_text())["build"] == info


def test_a_spec_path_or_override_cannot_put_code_into_model_py(tmp_path):
    folder = tmp_path / 'a"""\nraise SystemExit("injected")\n"""'
    folder.mkdir()
    spec = folder / "tiny.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    result = build(spec, out, "--target", "eager", "--set", 'dim=${48}  # """; raise SystemExit(1)')
    assert result.returncode == 0, result.stderr
    check = subprocess.run([sys.executable, "-c", "import model; print(model.ARCHSPEC_BUILD['overrides'])"], cwd=out,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == repr({"dim": '${48}  # """; raise SystemExit(1)'})


@pytest.mark.parametrize("files", [{"train.py": "precious"}, {"report.json": "{}", "model.py": "my own model"}])
def test_a_folder_that_is_no_build_is_refused_not_replaced(spec, tmp_path, files):
    out = tmp_path / "project"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    result = build(spec, out, "--target", "eager")
    assert result.returncode == 2 and "holds files archspec did not write" in result.stderr
    assert {p.name: p.read_text() for p in out.iterdir()} == files and leftovers(tmp_path) == []


def test_a_build_from_before_manifests_is_replaced_and_what_else_is_there_kept(spec, tmp_path):
    out = tmp_path / "out"
    assert build(spec, out, "--target", "onnx").returncode == 0
    (out / "manifest.json").unlink()  # as an archspec from before manifests left it
    (out / "notes.txt").write_text("mine")
    assert build(spec, out, "--target", "eager").returncode == 0
    assert {p.name for p in out.iterdir()} == {"report.json", "report.html", "model.py", "weights.pt", "manifest.json",
                                               "notes.txt"}


@pytest.mark.parametrize("case", ["existing file", "missing parent", "unwritable", "root", "current folder",
                                  "name too long"])
def test_output_folders_that_cannot_be_are_usage_errors(spec, tmp_path, case):
    cwd = ROOT
    if case == "existing file":
        out = tmp_path / "file"
        out.write_text("x")
    elif case == "missing parent":
        out = tmp_path / "a" / "b" / "c"
    elif case == "unwritable":
        out = Path("/proc/archspec-test/out")  # not even root may create folders in /proc
    elif case == "root":
        out = Path("/")
    elif case == "name too long":
        out = tmp_path / ("o" * 300)
    else:
        out, cwd = tmp_path / "here", tmp_path / "here"
        cwd.mkdir()
        (cwd / "manifest.json").write_text('{"files": {}}')
    result = subprocess.run(build_command(spec, out, "--target", "eager"), capture_output=True, text=True,
                            timeout=600, cwd=cwd)
    if case == "missing parent":  # parents are made, as mkdir -p
        assert result.returncode == 0, result.stderr
        assert_one_complete_build(out)
        return
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.startswith("archspec build: error: -o ")


@pytest.mark.parametrize("seed", ["-1", "18446744073709551616", "99999999999999999999999"])
def test_seeds_out_of_range_are_usage_errors(spec, tmp_path, seed):
    result = build(spec, tmp_path / "out", "--target", "eager", "--seed", seed)
    assert result.returncode == 2 and "--seed must be a whole number from 0 to" in result.stderr
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_the_staging_folder_of_a_killed_build_is_cleaned_by_the_next(spec, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".out.archspec-partial-{dead.stdout.strip()}-abc123"
    stale.mkdir()
    (stale / artifacts.PARTIAL_MARKER).write_text("")
    (stale / "weights.pt").write_bytes(b"half")
    assert build(spec, tmp_path / "out", "--target", "eager").returncode == 0
    assert leftovers(tmp_path) == []


# -- races ----------------------------------------------------------------------------------------------


def test_two_builds_racing_into_one_folder_leave_one_complete_build_and_a_reader_never_sees_a_mix(spec, tmp_path):
    out = tmp_path / "out"
    assert build(spec, out, "--target", "eager").returncode == 0  # an old build the racers replace
    other = tmp_path / "other.yaml"
    other.write_text(TINY.replace("dim: 32", "dim: 64"))
    seen, failures, stop = [], [], threading.Event()

    def read_once(fd: int) -> str:
        """One build, whole, through one handle of the folder."""
        names = set(os.listdir(fd))
        with os.fdopen(os.open("manifest.json", os.O_RDONLY, dir_fd=fd)) as f:
            manifest = json.load(f)
        assert names - {"manifest.json"} == set(manifest["files"]), names
        for name, record in manifest["files"].items():
            assert os.stat(name, dir_fd=fd).st_size == record["bytes"], name
        return manifest["build"]["spec"]

    def reader():
        """Read the folder the way a careful reader does: open it once, read through that handle,
        and start again if the folder it holds has been replaced meanwhile (then the old build
        is being removed under the handle, which is no mix: the new one is complete)."""
        while not stop.is_set():
            try:
                fd = os.open(out, os.O_RDONLY)
            except FileNotFoundError:
                continue  # only where the system has no atomic exchange
            try:
                seen.append(read_once(fd))
            except (OSError, AssertionError, ValueError) as exc:
                if os.fstat(fd).st_ino == os.stat(out).st_ino:  # not replaced: a real mix
                    failures.append(repr(exc))
            finally:
                os.close(fd)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        racers = [subprocess.Popen(build_command(s, out, "--target", "export"), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=ROOT) for s in (spec, other)]
        results = [(p.wait(timeout=600), p.stderr.read()) for p in racers]
    finally:
        stop.set()
        thread.join()
    for code, err in results:
        assert code == 0, err
    manifest = assert_one_complete_build(out)
    assert manifest["build"]["spec"] in (str(spec), str(other)) and "model.pt2" in manifest["files"]
    width = 32 if manifest["build"]["spec"] == str(spec) else 64  # every artifact is of the winner's spec
    assert json.loads((out / "report.json").read_text())["build"] == manifest["build"]
    assert torch.load(out / "weights.pt", weights_only=True)["mlp.fc1.weight"].shape == (width, 16)
    program = torch.export.load(out / "model.pt2")
    assert program.state_dict["mlp.fc1.weight"].shape == (width, 16)
    assert program.module()(torch.randn(3, 8, 16)).shape == (3, 8, 16)
    assert seen and not failures and leftovers(tmp_path) == []


# -- interrupts -----------------------------------------------------------------------------------------


def interrupt(spec: Path, out: Path, signum: int, when: str = "torch.export") -> tuple[int, str]:
    """Start a build, wait until its progress shows `when` under way, send `signum`; (exit code, stderr)."""
    proc = subprocess.Popen(build_command(spec, out, "--target", "onnx"), stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, bufsize=0)
    stderr, began = "", time.monotonic()
    while when not in stderr:
        char = proc.stderr.read(1)
        assert char, f"the build ended before {when}: {stderr}"
        stderr += char
        assert time.monotonic() - began < 300
    proc.send_signal(signum)
    stderr += proc.stderr.read()
    return proc.wait(timeout=120), stderr


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_rebuild_leaves_the_old_build_whole(spec, tmp_path, signum, code):
    out = tmp_path / "out"
    assert build(spec, out, "--target", "eager").returncode == 0
    before = snapshot(out)
    status, stderr = interrupt(spec, out, signum)
    assert status == code, stderr
    last = stderr.strip().splitlines()[-1]
    assert last == f"archspec build: interrupted by {signal.Signals(signum).name}; {out} holds the previous " \
                   "build, unchanged", stderr
    assert "Traceback" not in stderr
    assert snapshot(out) == before and leftovers(tmp_path) == []


def test_an_interrupted_first_build_leaves_nothing(spec, tmp_path):
    out = tmp_path / "out"
    status, stderr = interrupt(spec, out, signal.SIGTERM, when="write report.json")
    assert status == 143, stderr
    assert stderr.strip().endswith(f"{out} was not created")
    assert not out.exists() and leftovers(tmp_path) == []
