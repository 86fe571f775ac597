"""Issue 19 (hostile input, round three): the files a spec names and the build folder.

- `extends:` and `mappings:` name only YAML files in the spec's folder tree, archspec's specs
  folder or ARCHSPEC_PATH (archspec/language/paths.py): never /proc, devices, dotfiles or a
  file elsewhere, and no error quotes such a file.
- A build folder's manifest.json is not taken on its word (archspec/cli/artifacts.py): only
  regular files whose sha256 is the recorded one are replaced; a forged manifest is a usage
  error naming it; FIFOs in the folder cannot hang a build.
- A spec file whose name is not UTF-8 is refused at `check`, by name.

The build folder is exercised in-process through OutputDir (no torch), plus one real build.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import archspec
from archspec.cli.artifacts import MANIFEST, OutputDir, remove_build
from archspec.core.errors import SpecError, UsageError

from tests.conftest import ROOT
from tests.hostile.test_hostile import within

SECRET = "archspec-test-secret-7f3a"
BODY = "name: child\ninputs:\n  x: [B, 8, 16]\ngraph:\n  - mlp: {hidden: 32}\n"


def refusal(spec: Path) -> SpecError:
    """The SpecError `check` gives for `spec`, asserted to quote nothing secret."""
    with within(5):
        with pytest.raises(SpecError) as caught:
            archspec.check(spec)
    error = caught.value
    assert SECRET not in str(error) and all(SECRET not in text for text in error.sources.values()), str(error)
    return error


@pytest.fixture
def project(tmp_path) -> Path:
    """A spec's folder, beside a credentials file that is no business of the spec's."""
    (tmp_path / "creds.yaml").write_text(f"aws_secret_access_key: {SECRET}\nbroken: [\n")
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


# -- finding 2: extends and mappings read only what the rule allows -----------------------------------------


@pytest.mark.parametrize("target, reason", [
    ("/proc/self/environ", "system file"), ("/proc/kmsg", "system file"), ("/dev/zero", "system file"),
    ("/etc/passwd", "not a YAML file"), ("../creds.yaml", "outside the folders"),
    (".secrets.yaml", "hidden file"), ("link.yaml", "outside the folders"),
])
def test_extends_names_only_yaml_files_in_the_spec_tree(project, monkeypatch, target, reason):
    monkeypatch.setenv(SECRET, SECRET)  # in /proc/self/environ, were it read
    (project / ".secrets.yaml").write_text(f"token: {SECRET}\n: [\n")
    (project / "link.yaml").symlink_to(project.parent / "creds.yaml")  # a link out of the tree
    spec = project / "child.yaml"
    spec.write_text(f"extends: {target}\n" + BODY)
    error = refusal(spec)
    assert error.message == f"extends: {target!r} cannot be read: it is " + {
        "system file": "a system file (under /proc, /sys or /dev)", "not a YAML file": "not a YAML file (.yaml or .yml)",
        "outside the folders": "outside the folders a spec may read",
        "hidden file": "a hidden file (or in a hidden folder)"}[reason]
    assert error.loc is not None and (error.loc.file, error.loc.line) == (str(spec), 1)
    assert "ARCHSPEC_PATH" in error.hint


def test_the_cli_refuses_extends_of_the_environment_with_exit_1(project):
    spec = project / "child.yaml"
    spec.write_text("extends: /proc/self/environ\n" + BODY)
    env = {**os.environ, "ARCHSPEC_TEST_TOKEN": SECRET}
    result = subprocess.run([sys.executable, "-m", "archspec", "check", str(spec)], capture_output=True, text=True,
                            timeout=60, cwd=ROOT, env=env)
    assert result.returncode == 1 and SECRET not in result.stdout + result.stderr, result.stderr
    assert "child.yaml:1:10: error: extends: '/proc/self/environ' cannot be read: it is a system file" in result.stderr
    assert "Traceback" not in result.stderr


def test_mappings_name_only_yaml_files_in_the_spec_tree(project):
    """A refused mapping file is a located warning at check (a mapping matters only with
    --weights: archspec/language/mapping_sources.py), quoting nothing it would have read."""
    spec = project / "spec.yaml"
    spec.write_text(BODY + "mappings: [/proc/self/environ, ../creds.yaml]\n")
    with within(5):
        report = archspec.check(spec)
    assert report.graph.mappings == []
    found = [d for d in report.warnings if d.message.startswith("mappings:")]
    assert [d.message for d in found] == [
        "mappings: '/proc/self/environ' cannot be read: it is a system file (under /proc, /sys or /dev)",
        "mappings: '../creds.yaml' cannot be read: it is outside the folders a spec may read"]
    assert [(d.loc.line, d.loc.col) for d in found] == [(6, 12), (6, 32)]
    assert all(SECRET not in d.text() for d in report.warnings)


def test_what_the_rule_allows_still_works(project, tmp_path, monkeypatch):
    """The spec's own tree (below its folder), archspec's specs folder, and ARCHSPEC_PATH."""
    (project / "bases").mkdir()
    (project / "bases" / "base.yaml").write_text(BODY)
    (project / "below.yaml").write_text("extends: bases/base.yaml\nname: below\n")
    assert archspec.check(project / "below.yaml").graph.name == "below"
    shipped = project / "shipped.yaml"  # vit_ti16 extends vit_b16, which names mappings/ in specs/
    shipped.write_text(f"extends: {ROOT / 'specs' / 'vit_ti16.yaml'}\nname: mine\n")
    assert archspec.check(shipped).graph.name == "mine"
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "base.yaml").write_text(BODY)
    (project / "elsewhere.yaml").write_text("extends: ../shared/base.yaml\nname: elsewhere\n")
    assert "outside the folders" in refusal(project / "elsewhere.yaml").message
    monkeypatch.setenv("ARCHSPEC_PATH", str(shared))
    assert archspec.check(project / "elsewhere.yaml").graph.name == "elsewhere"


# -- findings 3 and 5: the build folder ---------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest(folder: Path, files: dict) -> None:
    (folder / MANIFEST).write_text(json.dumps({"written_by": "archspec build", "files": files}))


def rebuild(out: Path, written: dict[str, bytes]) -> OutputDir:
    """A build into `out` that writes `written` (name -> bytes), committed; its OutputDir."""
    with within(10):
        output = OutputDir.prepare(str(out))
        for name, data in written.items():
            Path(output.path(name)).write_bytes(data)
        output.commit()
    return output


def test_a_forged_manifest_is_a_usage_error_and_nothing_is_removed(tmp_path):
    """The red team's folder: a manifest listing the user's src/ tree and thesis.tex."""
    out = tmp_path / "paper"
    (out / "src").mkdir(parents=True)
    (out / "src" / "main.c").write_text("int main;")
    (out / "thesis.tex").write_text("four years")
    manifest(out, {"src": {}, "thesis.tex": {}})
    with pytest.raises(UsageError) as caught:
        OutputDir.prepare(str(out))
    assert str(caught.value) == (
        f"-o {out}: {out / MANIFEST} is no manifest archspec wrote: its entry 'src' has no size (archspec records "
        "the size and sha256 of every file it writes); archspec replaces nothing on its word: remove it if the "
        "folder is yours, or give a new folder")
    manifest(out, {"src": {"bytes": 4096, "sha256": sha(b"")}, "thesis.tex": {"bytes": 10}})
    with pytest.raises(UsageError, match=r"its entry 'src' is a folder, and archspec writes only files"):
        OutputDir.prepare(str(out))
    assert (out / "thesis.tex").read_text() == "four years" and (out / "src" / "main.c").read_text() == "int main;"
    assert remove_build(str(out)) == sorted(["src", "thesis.tex", MANIFEST])  # a stale folder: nothing goes either


def test_the_forged_manifest_build_exits_2_and_keeps_the_files(tmp_path):
    out = tmp_path / "paper"
    (out / "src").mkdir(parents=True)
    (out / "thesis.tex").write_text("four years")
    manifest(out, {"src": {}, "thesis.tex": {}})
    spec = tmp_path / "tiny.yaml"
    spec.write_text(BODY)
    result = subprocess.run([sys.executable, "-m", "archspec", "build", str(spec), "-o", str(out), "--target", "eager"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert f"{out / MANIFEST} is no manifest archspec wrote" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "src", "thesis.tex"]


def test_only_files_whose_recorded_hash_matches_are_replaced_or_removed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    files = {"model.py": b"# archspec's", "report.json": b"{}", "thesis.tex": b"four years", "big.bin": b"x" * 64,
             "model.onnx": b"onnx"}
    for name, data in files.items():
        (out / name).write_bytes(data)
    manifest(out, {"model.py": {"bytes": 12, "sha256": sha(b"# archspec's")},  # ours: replaced
                   "report.json": {"bytes": 2, "sha256": sha(b"[]")},  # hash differs: kept as .edited
                   "thesis.tex": {"bytes": 10, "sha256": sha(b"not the thesis")},  # hash differs: kept
                   "big.bin": {"bytes": 64},  # no hash pins it down: kept
                   "model.onnx": {"bytes": 4, "sha256": sha(b"onnx")}})  # ours, not written again: gone
    output = rebuild(out, {"model.py": b"new", "report.json": b"{\"new\": 1}", "big.bin": b"new"})
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != MANIFEST} == {
        "model.py": b"new", "report.json": b"{\"new\": 1}", "big.bin": b"new", "report.json.edited": b"{}",
        "thesis.tex": b"four years", "big.bin.kept": b"x" * 64}
    assert sorted(output.notes) == ["kept your big.bin as big.bin.kept", "kept your report.json as report.json.edited"]
    recorded = json.loads((out / MANIFEST).read_text())["files"]
    assert recorded["big.bin"] == {"bytes": 3, "sha256": sha(b"new")}  # every file hashed, whatever its size


def test_a_folder_from_before_manifests_keeps_the_users_model_py(tmp_path):
    """An archspec-looking report.json and no manifest: nothing in it is known to be archspec's."""
    out = tmp_path / "project"
    out.mkdir()
    (out / "report.json").write_text(json.dumps({"flops_convention": "multiply-add = 2", "nodes": []}))
    (out / "model.py").write_text("my own model")
    output = rebuild(out, {"model.py": b"generated", "report.json": b"{}"})
    assert (out / "model.py.kept").read_text() == "my own model" and (out / "model.py").read_bytes() == b"generated"
    assert "kept your model.py as model.py.kept" in output.notes


@pytest.mark.parametrize("name, expected", [
    (MANIFEST, "is no manifest archspec wrote: it is a named pipe (FIFO), not a file"),
    ("report.json", "holds files archspec did not write"),  # read for the legacy check: not at all, as a FIFO
    ("model.py", "its entry 'model.py' is a named pipe (FIFO), and archspec writes only files"),
])
def test_a_fifo_in_the_build_folder_does_not_hang(tmp_path, name, expected):
    out = tmp_path / "out"
    out.mkdir()
    if name == "model.py":
        manifest(out, {"model.py": {"bytes": 0, "sha256": sha(b"")}})
    os.mkfifo(out / name)
    with within(5):
        with pytest.raises(UsageError) as caught:
            OutputDir.prepare(str(out))
    assert expected in str(caught.value)


def test_an_archspec_build_folder_is_still_replaced_whole(tmp_path):
    """The manifest archspec writes passes its own checks: a rebuild replaces every file, keeps nothing."""
    out = tmp_path / "out"
    rebuild(out, {"model.py": b"one", "weights.pt": b"w" * 100})
    output = rebuild(out, {"model.py": b"two"})
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "model.py"] and output.notes == []


# -- finding 10 (part): a spec file name that is not UTF-8 ---------------------------------------------------


def test_a_spec_file_name_that_is_not_utf8_is_refused_at_check(tmp_path):
    name = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"t\xff.yaml"))
    Path(name).write_text(BODY)
    with pytest.raises(SpecError) as caught:
        archspec.check(name)
    assert caught.value.message == f"the file name {tmp_path}/t\\xff.yaml is not UTF-8 text"
    result = subprocess.run([sys.executable, "-m", "archspec", "check", b"t\xff.yaml"], capture_output=True,
                            timeout=60, cwd=tmp_path)
    stderr = result.stderr.decode("utf-8")
    assert result.returncode == 1 and "is not UTF-8 text" in stderr and "Traceback" not in stderr, stderr


def test_load_weights_without_the_graph_applies_the_rule_to_the_spec_files_mappings(project):
    """`load_weights(model, ...)` with no IR reads the mappings from the spec file the model was
    built from (compiler/weights/load.py): the same rule, the same refusal."""
    from archspec.compiler.weights.load import load_weights

    spec = project / "spec.yaml"
    spec.write_text(BODY)
    model = archspec.build(spec)
    spec.write_text(BODY + "mappings: [../creds.yaml]\n")  # edited after the build
    load_weights(model, model.state_dict())  # archspec's own naming fits: the mapping is not needed
    with pytest.raises(SpecError) as caught:  # a checkpoint named another way needs it
        load_weights(model, {f"other.{key}": value for key, value in model.state_dict().items()})
    assert caught.value.message == "mappings: '../creds.yaml' cannot be read: it is outside the folders a spec may read"
    assert SECRET not in str(caught.value) and all(SECRET not in t for t in caught.value.sources.values())


def test_the_language_servers_go_to_definition_follows_the_same_rule(project):
    """`extends` under the cursor goes to a file the spec may name, never to /proc or a dotfile."""
    pytest.importorskip("pygls")
    from archspec.lsp.analysis import analyse, definition

    (project / ".env.yaml").write_text(f"token: {SECRET}\n")
    (project / "base.yaml").write_text(BODY)
    spec = project / "child.yaml"
    for target, expected in (("base.yaml", str(project / "base.yaml")), ("/proc/self/environ", None),
                             (".env.yaml", None)):
        text = f"extends: {target}\n" + BODY
        spec.write_text(text)
        found = definition(analyse(text, str(spec)), line=0, character=10)
        assert (found.path if found else None) == expected, target


def test_a_subfolder_entry_goes_only_under_a_real_folder_and_only_whole(tmp_path):
    """A model folder's copies of its mapping files lie in a subfolder (`maps/mine.yaml` in the
    manifest): a path out of the folder or through a link is a forged manifest; a subfolder
    holding one file archspec did not write is carried over whole, not emptied."""
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("mine")
    (out / "link").symlink_to(elsewhere, target_is_directory=True)
    for name, says in (("../notes.txt", "is no file name archspec writes"), ("maps//x", "is no file name"),
                       ("link/notes.txt", "lies under link, which is no folder")):
        manifest(out, {name: {"bytes": 4, "sha256": sha(b"mine")}})
        with pytest.raises(UsageError, match=re.escape(says)):
            OutputDir.prepare(str(out))
    assert (elsewhere / "notes.txt").read_text() == "mine"
    (out / "link").unlink()
    (out / "maps").mkdir()
    (out / "maps" / "mine.yaml").write_bytes(b"ours")
    (out / "maps" / "todo.txt").write_bytes(b"the user's")
    manifest(out, {"maps/mine.yaml": {"bytes": 4, "sha256": sha(b"ours")}})
    rebuild(out, {"report.json": b"{}"})
    assert (out / "maps" / "todo.txt").read_bytes() == b"the user's" and (out / "maps" / "mine.yaml").exists()
    manifest(out, {"maps/mine.yaml": {"bytes": 4, "sha256": sha(b"ours")}, "report.json": {"bytes": 2, "sha256": sha(b"{}")}})
    (out / "maps" / "todo.txt").unlink()
    rebuild(out, {"report.json": b"{}"})
    assert not (out / "maps").exists()  # every file in it archspec's, unchanged, and not written again: gone
