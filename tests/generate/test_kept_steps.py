"""Compiled decode steps kept on disk (compiler/generate/kept_steps.py): generate(compile=True)
keeps the program it makes; the next model built the same way, in this process or another,
loads it instead of compiling, and generate()'s default uses it where it fits the call. A
program holds its weights and its model's options, so a model with other weights or another
option (a sliding window of another size, the same weights) must never get it: that would
decode silently wrong. One compile for the whole file (seconds), in the `made` fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from archspec.cli.main import main
from archspec.compiler.generate import compiled, decoder_of, generate
from archspec.compiler.generate.kept_steps import cache_root, trim, weights_digest

from tests.conftest import ROOT
from tests.generate.test_generate import LLAMA_SMALL, one_thread, prompt, sliding_llama  # noqa: F401  (autouse)

NEW = 12  # new tokens: 7 + 12 slots, a compiled cache of 64


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(the cache folder, the prompt, the eager tokens): a sliding-window llama's step compiled and kept."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARCHSPEC_CACHE", str(folder))
        torch.set_num_threads(1)
        model, ids = sliding_llama(window=5), prompt(2, 7, seed=3)
        eager = generate(model, ids, max_new_tokens=NEW, compile=False)
        assert torch.equal(generate(model, ids, max_new_tokens=NEW, compile=True), eager)
        yield folder, ids, eager


@pytest.fixture
def kept(made, monkeypatch):
    """The made folder as ARCHSPEC_CACHE, and no compile allowed: a program must come from disk."""
    folder, ids, eager = made
    monkeypatch.setenv("ARCHSPEC_CACHE", str(folder))

    def refuse(*args, **kwargs):
        raise AssertionError("compiled a decode step where a kept one should have been loaded")

    monkeypatch.setattr(compiled, "compile_frozen", refuse)
    return folder, ids, eager


def programs(folder) -> list:
    return sorted((folder / "decode-steps").glob("*/*.pt2"))


def test_compile_keeps_one_program_file(made):
    folder, _, _ = made
    files = programs(folder)
    assert len(files) == 1 and files[0].name.endswith("-t1-b2-s64.pt2") and files[0].stat().st_size > 0
    assert not list((folder / "decode-steps").glob("*/.*partial"))  # renamed into place, nothing left half-written


def test_the_next_model_built_the_same_way_loads_it_by_default(kept):
    folder, ids, eager = kept
    again = sliding_llama(window=5)  # another object, the same weights
    assert torch.equal(generate(again, ids, max_new_tokens=NEW), eager)
    assert decoder_of(again).compiled.how == {(2, 64): "loaded"}
    longer = generate(again, ids, max_new_tokens=70)  # 77 slots: a cache of 128, for which none is kept
    assert torch.equal(longer, generate(again, ids, max_new_tokens=70, compile=False))
    assert decoder_of(again).compiled.how == {(2, 64): "loaded"}  # eager: nothing made, nothing loaded
    assert torch.equal(generate(again, ids, max_new_tokens=NEW, compile=False), eager)  # False: never a kept one


def test_another_window_with_the_same_weights_does_not_get_it(kept):
    folder, ids, _ = kept
    other, same = sliding_llama(window=4), sliding_llama(window=5)
    assert weights_digest(other) == weights_digest(same)  # only the option differs
    out = generate(other, ids, max_new_tokens=NEW)
    assert decoder_of(other).compiled.how == {} and torch.equal(out, generate(other, ids, max_new_tokens=NEW,
                                                                             compile=False))
    assert not torch.equal(out, generate(same, ids, max_new_tokens=NEW))  # the window changes the tokens


def test_other_weights_do_not_get_it(kept):
    folder, ids, _ = kept
    model = sliding_llama(window=5)
    with torch.no_grad():
        next(model.parameters()).mul_(1.01)
    generate(model, ids, max_new_tokens=NEW)
    assert decoder_of(model).compiled.how == {}
    model.train()  # the same weights in training mode: another program
    assert not decoder_of(model).compiled_steps().ready(2, 64)


def test_another_process_loads_it(made):
    folder, ids, eager = made
    script = textwrap.dedent(f"""
        import os
        import torch
        from archspec.compiler.generate import compiled, decoder_of, generate
        from tests.generate.test_generate import sliding_llama
        os.environ["ARCHSPEC_CACHE"] = {str(folder)!r}  # after tests.conftest's "off"
        torch.set_num_threads(1)
        compiled.compile_frozen = None  # a compile would fail
        model = sliding_llama(window=5)
        out = generate(model, torch.tensor({ids.tolist()}), max_new_tokens={NEW})
        print(decoder_of(model).compiled.how, out[:, 7:].tolist())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[0] == f"{{(2, 64): 'loaded'}} {eager[:, 7:].tolist()}"


def test_the_command_line_says_it_keeps_and_loads_the_step(made, monkeypatch, capsys):
    folder, _, _ = made
    monkeypatch.setenv("ARCHSPEC_CACHE", str(folder))
    spec = folder / "sliding.yaml"
    spec.write_text((ROOT / "specs" / "llama.yaml").read_text().replace("attention: {kind: causal,",
                                                                         "attention: {kind: sliding, window: 5,"))
    sets = [a for k, v in LLAMA_SMALL.items() for a in ("--set", f"{k}={v}")]
    command = ["generate", str(spec), *sets, "--ids", "5,6,7", "--max-new-tokens", "6"]
    before = len(programs(folder))
    assert main([*command, "--compile"]) == 0  # its own weights (seed 0, no noise): compiled now, and kept
    made_now = capsys.readouterr()
    assert f"kept in {folder}" in made_now.err and len(programs(folder)) == before + 1
    monkeypatch.setattr(compiled, "compile_frozen", None)  # from here a compile would fail
    assert main(command) == 0
    loaded = capsys.readouterr()
    assert "compiled before, loaded" in loaded.err and loaded.out == made_now.out
    assert main([*command, "--no-compile"]) == 0
    eager = capsys.readouterr()
    assert "loaded" not in eager.err and eager.out == made_now.out


def test_off_keeps_nothing(monkeypatch):
    monkeypatch.setenv("ARCHSPEC_CACHE", "off")
    assert cache_root() is None
    monkeypatch.setenv("ARCHSPEC_CACHE", "~/elsewhere")
    assert str(cache_root()) == os.path.expanduser("~/elsewhere")
    monkeypatch.delenv("ARCHSPEC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert str(cache_root()) == "/x/cache/archspec"


def test_trim_removes_the_programs_used_longest_ago(tmp_path):
    root = tmp_path / "decode-steps"
    (root / "m").mkdir(parents=True)
    files = []
    for age, name in enumerate(["new", "mid", "old", "oldest"]):
        path = root / "m" / f"{name}.pt2"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1e9 - age * 100, 1e9 - age * 100))
        files.append(path)
    trim(root, 250, keep=files[3])  # the one just made is never removed, even if its time is older
    assert sorted(p.name for p in (root / "m").glob("*.pt2")) == ["new.pt2", "oldest.pt2"]
