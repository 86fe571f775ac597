"""Issue 19 (hostile input, round three), finding 9: `archspec train` and hostile options and files.

- Every option out of its range is a usage error (exit 2) in one line naming the option and
  the range: steps, batch (also against the memory available), learning rate, weight decay,
  seed; --fsdp/--ddp outside torchrun; a --save target that cannot be written (checked before
  training); a full disk while saving leaves the old file as it was and no half-written one.
- A --resume file is read with weights_only=True and checked against the model before anything
  is loaded (exit 1, naming the file and what is wrong): not a mapping, missing keys, empty,
  text, tensors of other names, shapes (other --set sizes), integer or non-finite values,
  optimizer state of another shape or optimizer, a step out of range.
- A loss that stops being finite stops the run with the step and the last finite loss (exit 1).

No case may end in a traceback (exit 3). Everything runs in-process through the CLI's main() on
a tiny spec (one subprocess through `python -m archspec.train`, the torchrun entry).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
import torch

from archspec.cli.main import main

from tests.conftest import LAUNCH_VARIABLES, ROOT, scratch
from tests.hostile.test_hostile import within

TINY = """\
name: tiny
params:
  img: 16
  dim: 16
inputs:
  image: [B, 3, img, img]
graph:
  - {id: patch_embed, patchify: {patch: 4, dim: "${dim}", pos: none}}
  - {id: mlp, mlp: {ratio: 2}}
  - {id: head, head: {kind: classify, classes: 3}}
"""
QUICK = ("--steps", "1", "--batch", "2")
pytestmark = pytest.mark.usefixtures("outside_torchrun")  # as one process, whatever the shell holds


@pytest.fixture(scope="module")
def spec(request, tmp_path_factory) -> str:
    path = scratch(request, tmp_path_factory, "spec") / "tiny.yaml"
    path.write_text(TINY)
    return str(path)


@pytest.fixture(scope="module")
def saved(request, spec, tmp_path_factory) -> dict:
    """A resume file as --save writes it (AdamW, one step), read back; resuming it works."""
    path = str(scratch(request, tmp_path_factory, "saved") / "state.pt")
    for args in (("--save", path), ("--resume", path, "--save", path)):
        with within(60):
            assert main(["train", spec, *QUICK, *args]) == 0
    return torch.load(path, weights_only=True)


def train(capsys, spec: str, *args: str) -> tuple[int, str]:
    """(exit code, stderr) of `archspec train SPEC --steps 1 --batch 2 ARGS` (later flags win)."""
    capsys.readouterr()
    with within(60):  # the code as it was ran 2^62 steps
        code = main(["train", spec, *QUICK, *args])
    return code, capsys.readouterr().err


def assert_usage_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("archspec train: error: ") and "step 1/" not in err, err
    for word in words:
        assert word in err, (word, err)


def assert_refused_file(code: int, err: str, path, *words: str) -> None:
    """Exit 1, the file named, nothing trained, no traceback."""
    assert code == 1, err
    assert "Traceback" not in err and "step 1/" not in err, err
    assert f"--resume {path}" in err, err
    for word in words:
        assert word in err, (word, err)


# -- options out of range: usage errors naming the option and its range ---------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--steps", "0"], ["--steps", "from 1 to 1,000,000"]),
    (["--steps", "-5"], ["--steps", "from 1 to 1,000,000", "-5"]),
    (["--steps", str(2**62)], ["--steps", "from 1 to 1,000,000"]),
    (["--batch", "0"], ["--batch", "from 1 to 1024"]),
    (["--batch", "100000000"], ["--batch", "from 1 to 1024", "100000000"]),
    (["--lr", "nan"], ["--lr", "finite number > 0", "nan"]),
    (["--lr", "inf"], ["--lr", "finite number > 0", "inf"]),
    (["--lr", "0"], ["--lr", "finite number > 0"]),
    (["--lr", "-0.001"], ["--lr", "finite number > 0"]),
    (["--weight-decay", "nan"], ["--weight-decay", "finite number >= 0"]),
    (["--weight-decay", "-0.1"], ["--weight-decay", "finite number >= 0"]),
    (["--seed", "-1"], ["--seed", "from 0 to 18446744073709551615"]),
    (["--seed", str(2**64)], ["--seed", "from 0 to 18446744073709551615"]),
    (["--fsdp"], ["--fsdp", "RANK, WORLD_SIZE, LOCAL_RANK", "launch with torchrun"]),
    (["--ddp"], ["--ddp", "RANK, WORLD_SIZE, LOCAL_RANK", "launch with torchrun"]),
], ids=["steps-0", "steps-negative", "steps-2^62", "batch-0", "batch-1e8", "lr-nan", "lr-inf", "lr-0",
        "lr-negative", "weight-decay-nan", "weight-decay-negative", "seed-negative", "seed-2^64", "fsdp-alone",
        "ddp-alone"])
def test_an_option_out_of_range_is_a_usage_error(spec, capsys, args, words):
    assert_usage_error(*train(capsys, spec, *args), *words)


def test_a_batch_beyond_the_memory_available_names_the_largest_that_fits(spec, capsys, monkeypatch):
    monkeypatch.setenv("ARCHSPEC_MAX_BUILD_BYTES", "1000000")  # 1 MB: room for a few dozen samples
    code, err = train(capsys, spec, "--batch", "1024")
    assert_usage_error(code, err, "--batch must be from 1 to ", "on this machine, got 1024", "ARCHSPEC_MAX_BUILD_BYTES")


def test_a_partial_torchrun_environment_is_a_usage_error(spec, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    code, err = train(capsys, spec, "--ddp")
    assert_usage_error(code, err, "RANK set but not WORLD_SIZE, LOCAL_RANK", "launch with torchrun")


def test_fsdp_outside_torchrun_through_the_torchrun_entry(spec):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    result = subprocess.run([sys.executable, "-m", "archspec.train", spec, "--fsdp"], capture_output=True, text=True,
                            timeout=120, env=env, cwd=ROOT)
    assert_usage_error(result.returncode, result.stderr, "--fsdp needs torchrun's processes")


# -- --save: checked before training, written whole or not at all ------------------------------------------------


@pytest.mark.parametrize("target, words", [
    ("", ["is a folder; give a file name inside it"]),
    ("missing/state.pt", ["does not exist; create it first"]),
], ids=["folder", "missing-folder"])
def test_a_save_target_that_cannot_be_written_is_refused_before_training(spec, capsys, tmp_path, target, words):
    code, err = train(capsys, spec, "--save", str(tmp_path / target))
    assert_usage_error(code, err, "--save", *words)


def test_a_full_disk_leaves_the_old_file_and_no_half_written_one(spec, capsys, tmp_path, monkeypatch):
    target = tmp_path / "state.pt"
    target.write_bytes(b"the previous state")

    def full_disk(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as out:
                out.write(b"half")
        else:
            f.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    code, err = train(capsys, spec, "--save", str(target))
    assert code == 2 and "Traceback" not in err, err
    assert f"--save {target}: could not write it: No space left on device; nothing was written" in err
    assert target.read_bytes() == b"the previous state"
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


# -- --resume: checked against the model before anything is loaded -------------------------------------------------


def with_tensor(saved: dict, name: str, value) -> dict:
    return {**saved, "model": {**saved["model"], name: value}}


def with_moment(saved: dict, name: str, key: str, value) -> dict:
    state = {**saved["optimizer"]["state"], name: {**saved["optimizer"]["state"][name], key: value}}
    return {**saved, "optimizer": {**saved["optimizer"], "state": state}}


def nan_at_first(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


FC1 = "mlp.fc1.weight"  # [32, 16] in the tiny spec
RESUME_FILES = {
    "bare-tensor": (lambda s: torch.zeros(3), ["holds a Tensor, not the mapping of model, optimizer, step"]),
    "list": (lambda s: [s["model"], s["optimizer"], s["step"]], ["holds a list"]),
    "missing-keys": (lambda s: {"model": s["model"]}, ["lacks 'optimizer', 'step'"]),
    "model-a-list": (lambda s: {**s, "model": [1, 2]}, ["its 'model' is a list"]),
    "missing-tensor": (lambda s: {**s, "model": {k: v for k, v in s["model"].items() if k != "mlp.fc1.bias"}},
                       ["lacks 1 of this model's tensors (mlp.fc1.bias)"]),
    "wrong-shape": (lambda s: with_tensor(s, FC1, torch.zeros(64, 16)),
                    [f"model tensor {FC1} is [64, 16] in the file and [32, 16] in this model"]),
    "integer-tensor": (lambda s: with_tensor(s, FC1, torch.ones(32, 16, dtype=torch.int64)),
                       [f"model tensor {FC1} holds int64 values", "not cast"]),
    "nan-weight": (lambda s: with_tensor(s, FC1, nan_at_first(s["model"][FC1])), [FC1, "NaN or infinite"]),
    "inf-weight": (lambda s: with_tensor(s, FC1, s["model"][FC1] * float("inf")), [FC1, "NaN or infinite"]),
    "moment-wrong-shape": (lambda s: with_moment(s, FC1, "exp_avg", torch.zeros(2)),
                           [f"optimizer state exp_avg of {FC1} is [2] in the file and [32, 16]"]),
    "moment-negative": (lambda s: with_moment(s, FC1, "exp_avg_sq", -torch.ones(32, 16)), ["exp_avg_sq", "negative"]),
    "moment-nan": (lambda s: with_moment(s, FC1, "exp_avg", nan_at_first(torch.zeros(32, 16))), ["NaN or infinite"]),
    "moment-of-no-parameter": (lambda s: {**s, "optimizer": {**s["optimizer"], "state": {
        **s["optimizer"]["state"], "ghost.weight": {}}}}, ["a parameter this model lacks: 'ghost.weight'"]),
    "optimizer-a-list": (lambda s: {**s, "optimizer": {"state": [], "param_groups": []}},
                         ["not the mapping of 'state' and 'param_groups'"]),
    "step-negative": (lambda s: {**s, "step": -3}, ["its step is -3", "from 0 to 1,000,000"]),
    "step-2^62": (lambda s: {**s, "step": 2**62}, ["its step is 4611686018427387904"]),
    "step-text": (lambda s: {**s, "step": "3"}, ["its step is '3'"]),
}


@pytest.mark.parametrize("case", list(RESUME_FILES))
def test_a_malformed_resume_file_is_refused_naming_what_is_wrong(spec, saved, capsys, tmp_path, case):
    make, words = RESUME_FILES[case]
    path = tmp_path / "state.pt"
    torch.save(make(saved), path)
    assert_refused_file(*train(capsys, spec, "--resume", str(path)), path, *words)


@pytest.mark.parametrize("content, words", [
    (b"", ["is empty (0 bytes)"]),
    (b"hello, I am not a checkpoint\n", ["cannot read it safely", "weights_only=True"]),
], ids=["empty", "text"])
def test_a_resume_file_that_is_no_checkpoint_is_refused(spec, capsys, tmp_path, content, words):
    path = tmp_path / "state.pt"
    path.write_bytes(content)
    assert_refused_file(*train(capsys, spec, "--resume", str(path)), path, *words)


def test_resuming_with_other_sizes_names_the_first_tensor_and_both_shapes(spec, saved, capsys, tmp_path):
    path = tmp_path / "state.pt"
    torch.save(saved, path)
    code, err = train(capsys, spec, "--resume", str(path), "--set", "dim=24")
    assert_refused_file(code, err, path, "model tensor patch_embed.proj.weight is [16, 3, 4, 4] in the file and "
                                         "[24, 3, 4, 4] in this model", "other --set sizes")


def test_resuming_with_another_optimizer_is_refused(spec, saved, capsys, tmp_path):
    path = tmp_path / "state.pt"
    torch.save(saved, path)
    code, err = train(capsys, spec, "--resume", str(path), "--optimizer", "sgd")
    assert_refused_file(code, err, path, "written by another optimizer than this run's sgd")


# -- a loss that stops being finite stops the run ---------------------------------------------------------------------


def test_a_loss_that_turns_nan_stops_the_run_with_the_last_finite_loss(spec, capsys):
    code, err = train(capsys, spec, "--optimizer", "sgd", "--lr", "1e30", "--steps", "3")
    assert code == 1 and "Traceback" not in err, err
    assert "training stopped at step 2: the loss is nan (the last finite loss was" in err and "at step 1)" in err
    assert "step 3/3" not in err and "lower --lr (it is 1e+30)" in err
