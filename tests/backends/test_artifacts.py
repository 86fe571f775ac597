"""The build folder (archspec/cli/artifacts.py): builds that really race into one folder, builds
really interrupted by SIGINT and SIGTERM, rebuilds that leave exactly their own artifacts and
never delete what archspec did not write, what report.json and model.py record, and the
output folders `-o` cannot be."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from archspec.cli import artifacts
from archspec.compiler.weights.checkpoint import read_state_dict

from tests.conftest import ROOT

FOLDER = ("model.safetensors", "config.json", "README.md", "tiny.yaml")  # a model folder (compiler/pretrained.py)

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
    assert names == {"report.json", "report.html", "model.py", *FOLDER, "manifest.json", "notes.txt", "plots",
                     "model.py.edited"}, names  # model.onnx and model.pt2 of the first build are gone
    assert (out / "notes.txt").read_text() == "mine" and (out / "plots" / "loss.png").read_bytes() == b"\x89PNG"
    assert (out / "model.py.edited").read_text() == edited
    assert "kept your model.py as model.py.edited" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {"report.json", "report.html", "model.py", *FOLDER}
    assert leftovers(tmp_path) == []


def test_report_and_model_py_record_the_spec_its_hash_the_overrides_and_the_versions(spec, tmp_path):
    import archspec

    out = tmp_path / "out"
    result = build(spec, out, "--target", "eager", "--set", "dim=48", "--seed", "7")
    assert result.returncode == 0, result.stderr
    info = json.loads((out / "report.json").read_text())["build"]
    assert info["spec"] == info["spec_file"] == "../tiny.yaml"  # named absolutely: relative to the build folder
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


def test_a_build_from_before_manifests_is_replaced_and_all_it_held_kept(spec, tmp_path):
    """Without a manifest nothing pins down which files archspec wrote (issue 19: a forged
    report.json must not get the user's model.py overwritten): every file is kept, a name the
    new build writes again as NAME.kept."""
    out = tmp_path / "out"
    assert build(spec, out, "--target", "onnx").returncode == 0
    (out / "manifest.json").unlink()  # as an archspec from before manifests left it
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    assert build(spec, out, "--target", "eager").returncode == 0
    new = {"report.json", "report.html", "model.py", *FOLDER}
    after = snapshot(out)
    assert set(after) == new | {"manifest.json"} | {f"{n}.kept" if n in new else n for n in before}, sorted(after)
    assert all(after[f"{n}.kept" if n in new else n] == digest for n, digest in before.items())


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


class Reader:
    """Reads the folder over and over, the way a careful reader does, in a thread: open it once,
    read through that handle, and start again if the folder it holds has been replaced meanwhile
    (then the old build is being removed under the handle, which is no mix: the new one is
    complete). Anything else that goes wrong is a failure, recorded, never lost with the thread."""

    def __init__(self, out: Path):
        self.out, self.seen, self.failures, self.stop = out, [], [], threading.Event()
        self.thread = threading.Thread(target=self.loop)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def loop(self) -> None:
        while not self.stop.is_set():
            try:
                fd = os.open(self.out, os.O_RDONLY)
            except FileNotFoundError:
                continue  # only where the system has no atomic exchange
            try:
                self.seen.append(self.read_once(fd))
            except Exception as exc:  # noqa: BLE001 - judged below, never lost
                if not self.replaced(fd):
                    self.failures.append(repr(exc))
            finally:
                os.close(fd)

    def replaced(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino != os.stat(self.out).st_ino
        except FileNotFoundError:
            return False  # the folder vanished: readers must never see that

    @staticmethod
    def read_once(fd: int) -> str:
        """One build, whole, through one handle of the folder: the files its manifest lists, each
        of the recorded size. Returns what made it."""
        names = set(os.listdir(fd))
        with os.fdopen(os.open("manifest.json", os.O_RDONLY, dir_fd=fd)) as f:
            manifest = json.load(f)
        assert names - {"manifest.json"} == set(manifest["files"]), names
        for name, record in manifest["files"].items():
            assert os.stat(name, dir_fd=fd).st_size == record["bytes"], name
        return manifest["build"]["spec"]


def test_two_builds_racing_into_one_folder_leave_one_complete_build_and_a_reader_never_sees_a_mix(spec, tmp_path):
    out = tmp_path / "out"
    assert build(spec, out, "--target", "eager").returncode == 0  # an old build the racers replace
    other = tmp_path / "other.yaml"
    other.write_text(TINY.replace("dim: 32", "dim: 64"))
    with Reader(out) as reader:
        racers = [subprocess.Popen(build_command(s, out, "--target", "export"), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=ROOT) for s in (spec, other)]
        results = [(p.wait(timeout=600), p.stderr.read()) for p in racers]
    for code, err in results:
        assert code == 0, err
    manifest = assert_one_complete_build(out)
    recorded = {f"../{spec.name}": 32, f"../{other.name}": 64}  # the specs as the build folder sees them
    assert manifest["build"]["spec"] in recorded and "model.pt2" in manifest["files"]
    width = recorded[manifest["build"]["spec"]]  # every artifact is of the winner's spec
    assert json.loads((out / "report.json").read_text())["build"] == manifest["build"]
    assert read_state_dict(str(out / "model.safetensors"))["mlp.fc1.weight"].shape == (width, 16)
    program = torch.export.load(out / "model.pt2")
    assert program.state_dict["mlp.fc1.weight"].shape == (width, 16)
    assert program.module()(torch.randn(3, 8, 16)).shape == (3, 8, 16)
    assert reader.seen and not reader.failures and leftovers(tmp_path) == []


def commit_in_rounds(out: str, writer: int, barrier, rounds: int) -> None:
    """One racer: each round, stage a build of its own (file names and sizes only it writes), wait
    at the barrier for the others, and commit at the same moment as they do."""
    for round_ in range(rounds):
        folder = artifacts.OutputDir.prepare(out)
        for name, size in ((f"only-{writer}.bin", 1000 * (writer + 1)), ("shared.bin", 10_000 + writer)):
            with open(folder.path(name), "wb") as f:
                f.write(bytes([writer]) * size)
        barrier.wait(timeout=60)
        folder.commit({"spec": f"writer {writer}", "round": round_})


def test_commits_released_together_by_a_barrier_never_mix(tmp_path):
    """The commit itself, raced for certain: four processes stage a build each, wait at a barrier
    and commit at once, fifty times over, while a reader reads the folder without pause."""
    import multiprocessing

    out, writers, rounds = tmp_path / "out", 4, 50
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(writers)
    with Reader(out) as reader:
        racers = [context.Process(target=commit_in_rounds, args=(str(out), w, barrier, rounds))
                  for w in range(writers)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(timeout=300)
    assert [racer.exitcode for racer in racers] == [0] * writers
    manifest = assert_one_complete_build(out)
    assert manifest["build"]["spec"].startswith("writer ") and manifest["build"]["round"] == rounds - 1
    assert not reader.failures, reader.failures[:5]
    assert len(set(reader.seen)) >= 2, "the reader saw the builds of fewer than two writers"
    assert leftovers(tmp_path) == []


# -- interrupts -----------------------------------------------------------------------------------------


def interrupt(spec: Path, out: Path, signum: int, when: str = "torch.export") -> tuple[int, str]:
    """Start a build, wait until its progress shows `when` under way, send `signum`; (exit code, stderr).
    Reads the raw pipe (select, then os.read: no buffer select cannot see), within a deadline."""
    proc = subprocess.Popen(build_command(spec, out, "--target", "onnx"), stderr=subprocess.PIPE, cwd=ROOT)
    fd, seen, deadline = proc.stderr.fileno(), b"", time.monotonic() + 300
    while when.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:  # a build that stalls without a word fails the test instead of hanging it
            proc.kill()
            pytest.fail(f"no sign of {when} after 300 s: {seen.decode(errors='replace')}")
        chunk = os.read(fd, 4096)
        assert chunk, f"the build ended before {when}: {seen.decode(errors='replace')}"
        seen += chunk
    proc.send_signal(signum)
    rest = proc.stderr.read()
    return proc.wait(timeout=120), (seen + rest).decode(errors="replace")


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


def test_a_signal_whose_exception_a_library_swallows_still_stops_the_build(spec, tmp_path, monkeypatch, capsys):
    """Some libraries catch BaseException: the signal is noted when it arrives, and the build stops
    after the step it arrived in instead of running the next (here: torch.export never starts)."""
    from archspec.cli.commands import build as build_command_module
    from archspec.cli.main import main

    real_lower, exported = build_command_module.Build.lower, []

    def lower_that_swallows(self):
        real_lower(self)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs here and raises Interrupted ...
        except BaseException:  # noqa: BLE001 - ... which this "library" swallows
            pass

    monkeypatch.setattr(build_command_module.Build, "lower", lower_that_swallows)
    from archspec.compiler.backends import targets

    monkeypatch.setattr(type(targets.get("export")), "build", lambda self, context: exported.append(1))
    out = tmp_path / "out"
    assert main(["build", str(spec), "-o", str(out), "--target", "export"]) == 143
    assert exported == [] and not out.exists() and leftovers(tmp_path) == []
    assert capsys.readouterr().err.strip().endswith(f"interrupted by SIGTERM; {out} was not created")


def test_an_interrupted_first_build_leaves_nothing(spec, tmp_path):
    out = tmp_path / "out"
    status, stderr = interrupt(spec, out, signal.SIGTERM, when="write report.json")
    assert status == 143, stderr
    assert stderr.strip().endswith(f"{out} was not created")
    assert not out.exists() and leftovers(tmp_path) == []


# -- the system refuses ---------------------------------------------------------------------------------


def test_a_full_disk_is_a_usage_error_naming_the_folder_not_a_bug(tmp_path, monkeypatch):
    """torch.save on a full disk raises a RuntimeError in its own words; the step is judged by
    the room left where it writes. A system refusal given as an OSError is named as such."""
    import errno
    import shutil as shutil_module

    from archspec.cli import progress
    from archspec.core.errors import UsageError

    def torch_save_on_a_full_disk():
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1953920 vs 1953808")

    steps = progress.Progress(2, stream=open(os.devnull, "w"), writes_to=str(tmp_path), writes_shown="out")
    usage = shutil_module.disk_usage(tmp_path)
    monkeypatch.setattr(progress.shutil, "disk_usage", lambda folder: usage._replace(free=5 << 20))
    with pytest.raises(UsageError, match=r"write weights.pt: the disk holding out is full \(5 MiB left\)"):
        steps.run("write weights.pt", torch_save_on_a_full_disk)

    def refused():
        raise OSError(errno.EROFS, "Read-only file system", "out/model.pt2")

    with pytest.raises(UsageError, match=r"export: the system refused \(Read-only file system\): out/model.pt2"):
        steps.run("export", refused)
    monkeypatch.setattr(progress.shutil, "disk_usage", lambda folder: usage._replace(free=10 << 30))
    with pytest.raises(Exception) as caught:  # room enough: the same failure is a bug, said so
        steps.run("write weights.pt", torch_save_on_a_full_disk)
    assert not isinstance(caught.value, UsageError) and "bug in archspec" in str(caught.value.hint)


def test_the_weights_file_is_as_readable_as_the_folders_other_files(tmp_path):
    """safetensors writes 0600; a model folder's weights get the mode of any new file (the umask's)."""
    import stat

    import archspec
    from archspec.core.files import new_file_mode

    spec = tmp_path / "m.yaml"
    spec.write_text("name: m\ninputs:\n  x: [B, 4, 8]\ngraph:\n  - mlp: {ratio: 2}\n")
    archspec.build(spec).save_pretrained(tmp_path / "folder")
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "folder").iterdir()}
    assert modes["model.safetensors"] == new_file_mode() == modes["config.json"], modes
