"""Issue 19 (hostile input, round three), finding 10's rest: the numbers a command takes, and the
specs that cost the checker far more than their size.

- `bench` takes --threads from 1 to the machine's logical CPUs (torch crashed on 100,000),
  --rounds and --samples within MAX_ROUNDS and MAX_SAMPLES, at most MAX_BATCHES batch sizes of 1
  to 1,024 (the batches the checker proves shapes for) whose activations fit in the memory
  available; `check --target` and `build` take --batch in the same range. Each is a usage error
  (exit 2) naming the option and the range, before any work.
- A chain of `extends` holds at most MAX_VALUES values in all its files together (16 levels of
  ~250 KB specs took seconds, and everything after the loader worked on 16 specs' worth of
  values); the refusal is located at the `extends` line that goes over.
- Thousands of errors in one spec, or thousands of unknown paths in a `remove`, are reported in
  time linear in their number (both were quadratic: a minute or more for a 250 KB spec).

The timed blocks are hang guards, many times what the work takes now.
"""

from __future__ import annotations

import itertools
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest

import archspec
from archspec.cli.commands.bench import MAX_BATCHES, MAX_ROUNDS, MAX_SAMPLES
from archspec.cli.main import main
from archspec.core.errors import SpecError
from archspec.language.limits import MAX_EXTENDS, MAX_TEXT_BYTES, MAX_VALUES

from tests.conftest import ROOT
from tests.hostile.test_hostile import within

LETTERS_DIGITS = string.ascii_lowercase + string.digits
TINY = "name: tiny\ninputs:\n  x: [B, 8, 16]\ngraph:\n  - mlp: {hidden: 32}\n"


@pytest.fixture
def tiny(tmp_path) -> Path:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    return spec


def usage_error(capsys, *argv: str) -> str:
    """The one line a command that must refuse its options prints (exit 2, no traceback)."""
    with within(60):  # before the change some of these ran for hours (--rounds 10^9)
        code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- bench, check and build: the numbers they take -------------------------------------------------------


def test_bench_threads_beyond_the_machine_is_a_usage_error(tiny):
    """torch.set_num_threads(100000) crashed the process (a segfault); now it is refused first."""
    result = subprocess.run([sys.executable, "-m", "archspec", "bench", str(tiny), "--threads", "100000",
                             "--rounds", "1"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    cpus = os.cpu_count() or 1
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip() == f"archspec bench: error: --threads takes 1 to {cpus:,} (this machine's logical " \
                                    "CPUs), got 100000"


@pytest.mark.parametrize("argv, says", [
    (["--rounds", "1000000000"], f"--rounds takes 1 to {MAX_ROUNDS:,}, got 1000000000"),
    (["--samples", "100000000"], f"--samples takes 0 to {MAX_SAMPLES:,}, got 100000000"),
    (["--samples", "-1"], f"--samples takes 0 to {MAX_SAMPLES:,}, got -1"),
    (["--batch", "100000000"], "--batch takes 1 to 1,024 (the batch sizes the checker proves shapes for), "
                               "got 100000000"),
    (["--batch", "2000"], "--batch takes 1 to 1,024"),
    (["--batch", *map(str, range(1, MAX_BATCHES + 2))],
     f"--batch takes 1 to {MAX_BATCHES} sizes, got {MAX_BATCHES + 1}"),
])
def test_bench_numbers_out_of_range_are_usage_errors(capsys, tiny, argv, says):
    err = usage_error(capsys, "bench", str(tiny), "--rounds", "1", *argv)
    assert err.startswith("archspec bench: error: ") and says in err, err


def test_bench_batch_beyond_the_memory_is_a_usage_error_naming_what_fits(capsys, tiny, monkeypatch):
    """512 B of activations per sample and 8,832 B of weights (1,104 parameters, counted twice as
    build counts them): with 100,000 B, batch 178 fits."""
    monkeypatch.setenv("ARCHSPEC_MAX_BUILD_BYTES", "100000")
    err = usage_error(capsys, "bench", str(tiny), "--rounds", "1", "--batch", "1", "1000")
    assert err == ("archspec bench: error: --batch 1000: this model needs about 508.6 KB of memory at that batch "
                   "(512 B of activations per sample), and 97.7 KB is available: --batch takes 1 to 178 here "
                   "(set ARCHSPEC_MAX_BUILD_BYTES to allow more)"), err


def test_bench_refuses_a_model_whose_weights_do_not_fit_as_build_does(capsys, tiny, monkeypatch):
    monkeypatch.setenv("ARCHSPEC_MAX_BUILD_BYTES", "1000")
    with within(60):
        assert main(["bench", str(tiny), "--rounds", "1"]) == 1
    err = capsys.readouterr().err
    assert "building this model needs about" in err and "tiny.yaml:5:5" in err and "Traceback" not in err, err


@pytest.mark.parametrize("batch", ["9999999999", "99999999999999999999999", "1:8:4096"])
def test_check_target_batch_beyond_the_checker_is_a_usage_error(capsys, tiny, batch):
    """The coverage check traced the model at the batch: 10^10 asked torch for petabytes (exit 3)."""
    err = usage_error(capsys, "check", str(tiny), "--target", "tensorrt", "--batch", batch)
    assert err == ("archspec check: error: --batch takes sizes from 1 to 1,024 (the batch sizes the checker proves "
                   f"shapes for), got '{batch}'"), err


def test_check_target_batch_beyond_the_memory_is_a_usage_error(capsys, tiny, monkeypatch):
    monkeypatch.setenv("ARCHSPEC_MAX_BUILD_BYTES", "100000")
    err = usage_error(capsys, "check", str(tiny), "--target", "tensorrt", "--batch", "1000")
    assert "--batch 1000: this model needs about" in err and "--batch takes 1 to 178 here" in err, err


def test_build_batch_beyond_the_checker_is_a_usage_error(capsys, tiny, tmp_path):
    err = usage_error(capsys, "build", str(tiny), "--target", "export", "--batch", "1:8:99999", "-o",
                      str(tmp_path / "out"))
    assert "--batch takes sizes from 1 to 1,024" in err and "'1:8:99999'" in err, err
    assert not (tmp_path / "out").exists()


# -- extends: a chain is bounded as a whole --------------------------------------------------------------


def write_chain(folder: Path, levels: int, params_per_level: int) -> Path:
    """`levels` specs, each extending the one before and adding `params_per_level` params of its own;
    the last one's path."""
    for level in range(levels):
        head = f"extends: level_{level - 1}.yaml\n" if level else TINY.replace("name: tiny\n", "")
        params = "".join(f"  p{level}_{i}: {i}\n" for i in range(params_per_level))
        (folder / f"level_{level}.yaml").write_text(f"{head}name: level_{level}\nparams:\n{params}")
    return folder / f"level_{levels - 1}.yaml"


def test_a_chain_of_large_specs_is_refused_where_it_goes_over(tmp_path):
    """16 levels of ~250 KB each: the whole chain is bounded as one spec file is."""
    last = write_chain(tmp_path, MAX_EXTENDS, 14_000)
    assert 0.9 * MAX_TEXT_BYTES < last.stat().st_size <= MAX_TEXT_BYTES
    with within(30):  # took 6 s before, loading all 16
        with pytest.raises(SpecError) as caught:
            archspec.check(last)
    error = caught.value
    assert error.message == (f"extends: level_12.yaml makes the chain hold more than {MAX_VALUES:,} values (keys and "
                             "values, in this spec and every spec it extends: archspec's limit)"), error.message
    assert (Path(error.loc.file).name, error.loc.line, error.loc.col) == ("level_13.yaml", 1, 10)


def test_a_chain_within_the_bound_checks_with_every_level(tmp_path):
    last = write_chain(tmp_path, MAX_EXTENDS, MAX_VALUES // (2 * MAX_EXTENDS) - 10)
    report = archspec.check(last)
    assert report.name == f"level_{MAX_EXTENDS - 1}"
    with pytest.raises(SpecError, match="makes the chain hold more than"):  # one level more, and over
        archspec.check(write_chain(tmp_path, MAX_EXTENDS, MAX_VALUES // (2 * MAX_EXTENDS) + 100))


# -- many errors, many paths: linear ---------------------------------------------------------------------


def test_thirty_thousand_errors_are_reported_in_linear_time():
    """33,696 `dims` that are no list (three-letter names, in one flow mapping): every one reported.
    This took about a minute: each error was compared with every other."""
    names = ["".join(name) for name in itertools.product(string.ascii_lowercase, LETTERS_DIGITS, LETTERS_DIGITS)]
    text = TINY + "dims: {" + ",".join(f"{name}: 8" for name in names) + "}\n"
    assert len(text) < MAX_TEXT_BYTES
    with within(20):
        with pytest.raises(SpecError) as caught:
            archspec.check_text(text)
    assert len(caught.value.diagnostics) == len(names) == 33_696
    assert caught.value.diagnostics[-1].message == "`dims.z99` must be a list; got 8"


def test_a_remove_of_thousands_of_unknown_paths_stays_linear_and_its_hints_short(tmp_path):
    """5,000 nodes, 5,000 unknown paths: each error searched every name (a "did you mean") and
    listed them all in its hint (minutes, and megabytes of hints)."""
    nodes = 5_000
    (tmp_path / "base.yaml").write_text("name: base\ninputs:\n  x: [B, 8, 16]\ngraph:\n" +
                                        "".join(f"  - {{id: n{i}, mlp: {{hidden: 32}}}}\n" for i in range(nodes)))
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nremove: [" +
                                         ", ".join(f"zz{i}" for i in range(nodes)) + "]\n")
    with within(20):
        with pytest.raises(SpecError) as caught:
            archspec.check(tmp_path / "child.yaml")
    problems = caught.value.diagnostics
    assert len(problems) == nodes and all(p.message.startswith("unknown node 'zz") for p in problems)
    assert problems[-1].hint == ("the base graph has n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, n12, n13, n14, "
                                 "n15, n16, n17, n18, n19 and 4,980 more")
