"""Issue 20, item 2: training on real data (`archspec train SPEC --data ...`).

- An image folder (torchvision's ImageFolder, timm's transforms) of two colours of shapes, made
  by tests/train/train_data_shapes.py: a tiny model reaches top-1 >= 0.9 (chance 0.5).
- The learning rate follows torch's own schedulers (LinearLR warm-up, CosineAnnealingLR), in
  the run too; clipping bounds the gradients' norm at the optimizer step.
- A token file gives windows of the spec's length with the next tokens as targets, the last
  --val-fraction for validation; module:function gives your own dataset.
- Every data option out of range, and every missing or malformed dataset, is one plain line
  (exit 2 for the command line, exit 1 for the data's contents), never a traceback.
- Under --fsdp --save writes a sharded torch.distributed.checkpoint folder (two processes) that
  one process resumes, taking the straight run's next step; a crafted .metadata cannot run code.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy
import pytest
import torch

from archspec.cli.main import main

from tests.conftest import LAUNCH_VARIABLES, ROOT, scratch
from tests.hostile.test_hostile import within
from tests.train.train_data_shapes import make_shapes

IMAGES = """\
name: tiny_images
params: {img: 16, dim: 32, classes: 2}
inputs:
  image: [B, 3, img, img]
graph:
  - {id: patch_embed, patchify: {patch: 4, dim: "${dim}", pos: none}}
  - id: blocks
    repeat: 2
    graph:
      - {id: mlp, mlp: {ratio: 2}}
  - {id: head, head: {kind: classify, classes: "${classes}"}}
"""
TOKENS = """\
name: tiny_tokens
params: {vocab: 64, dim: 32}
dims:
  L: [1, 8]
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: "${vocab}", dim: "${dim}", pos: learned, max_len: 8}}
  - id: blocks
    repeat: 1
    graph:
      - {id: attn, attention: {kind: causal, heads: 2}}
      - {id: mlp, mlp: {ratio: 2}}
  - {id: norm, norm: {}}
  - {id: head, head: {kind: lm, tie: embed}}
"""
pytestmark = pytest.mark.usefixtures("outside_torchrun")  # as one process, whatever the shell holds


@pytest.fixture(scope="module")
def image_spec(request, tmp_path_factory) -> str:
    path = scratch(request, tmp_path_factory, "spec") / "tiny_images.yaml"
    path.write_text(IMAGES)
    return str(path)


@pytest.fixture(scope="module")
def token_spec(request, tmp_path_factory) -> str:
    path = scratch(request, tmp_path_factory, "spec") / "tiny_tokens.yaml"
    path.write_text(TOKENS)
    return str(path)


@pytest.fixture(scope="module")
def shapes(request, tmp_path_factory) -> str:
    """Red circles and green squares, 16x16: 24 per class to train on, 10 to validate."""
    out = str(scratch(request, tmp_path_factory, "shapes"))
    make_shapes(out, classes=2, train=24, val=10, size=16, seed=1)
    return out


def train(capsys, spec: str, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `archspec train SPEC ARGS`."""
    capsys.readouterr()
    with within(120):
        code = main(["train", spec, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def summary_of(capsys, spec: str, *args: str) -> dict:
    code, out, err = train(capsys, spec, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def assert_plain_error(code: int, err: str, expected: int, *words: str) -> None:
    assert code == expected, err
    assert "Traceback" not in err and "step 1/" not in err, err
    for word in words:
        assert word in err, (word, err)


# -- an image folder ------------------------------------------------------------------------------------------


def test_an_image_folder_trains_well_above_chance(image_spec, shapes, capsys):
    summary = summary_of(capsys, image_spec, "--data", shapes, "--epochs", "4", "--batch", "8", "--lr", "5e-3",
                         "--warmup", "2")
    assert summary["data"] == {"kind": "images", "train": 48, "val": 20, "classes": ["green_square", "red_circle"]}
    assert summary["steps"] == 24 and [e["step"] for e in summary["evals"]] == [6, 12, 18, 24]
    assert summary["evals"][-1]["val_samples"] == 20
    assert summary["evals"][-1]["top1"] >= 0.9, summary["evals"]  # chance: 0.5; 18 of 20 by luck: p < 2e-4


def test_the_seed_fixes_the_augmented_run(image_spec, shapes, capsys):
    runs = [summary_of(capsys, image_spec, "--data", shapes, "--steps", "3", "--batch", "8", "--seed", str(seed))
            for seed in (5, 5, 6)]
    assert runs[0]["losses"] == runs[1]["losses"] != runs[2]["losses"]


def test_progress_shows_lr_throughput_eta_and_validation(image_spec, shapes, capsys):
    code, _, err = train(capsys, image_spec, "--data", shapes, "--epochs", "1", "--batch", "16")
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("step 1/3  loss ") and " lr " in lines[0] and " samples/s  ETA 0:00:" in lines[0]
    assert lines[-1].startswith("epoch 1  step 3/3  val loss ")
    assert "top-1 " in lines[-1] and "(20 samples)" in lines[-1]


# -- the schedule and clipping ----------------------------------------------------------------------------------


def torch_rates(total: int, warmup: int) -> list[float]:
    """What torch's LinearLR (warm-up) and CosineAnnealingLR (after it) give, step by step."""
    rates = []
    parameter = torch.nn.Parameter(torch.zeros(1))
    if warmup:
        optimizer = torch.optim.SGD([parameter], lr=1.0)
        linear = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / warmup, end_factor=1.0,
                                                   total_iters=max(warmup - 1, 1))
        for _ in range(warmup):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            linear.step()
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - warmup)
    for _ in range(total - warmup):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        cosine.step()
    return rates


@pytest.mark.parametrize("total, warmup", [(20, 0), (20, 5), (7, 2), (10, 10)])
def test_the_schedule_is_torchs_warmup_then_cosine(total, warmup):
    from archspec.train.schedule import lr_factor

    ours = [lr_factor(k, total, warmup) for k in range(total)]
    reference = torch_rates(total, warmup) if warmup < total else [(k + 1) / warmup for k in range(total)]
    assert ours == pytest.approx(reference, abs=1e-9)
    assert [lr_factor(k, total, warmup, "constant") for k in range(warmup, total)] == [1.0] * (total - warmup)


def test_the_run_sets_the_scheduled_rate_at_each_step(image_spec, shapes, capsys):
    summary = summary_of(capsys, image_spec, "--data", shapes, "--epochs", "2", "--batch", "8", "--lr", "0.01",
                         "--warmup", "4")
    assert summary["lrs"] == pytest.approx([0.01 * r for r in torch_rates(12, 4)], rel=1e-9)
    constant = summary_of(capsys, image_spec, "--steps", "3", "--batch", "2", "--lr", "0.01")  # the synthetic set
    assert constant["lrs"] == [0.01] * 3


def test_clipping_bounds_the_gradients_norm_at_the_step(image_spec, shapes, monkeypatch):
    from archspec.train.loop import Trainer
    from archspec.train.options import Options

    norms = {}
    for clip in (None, 1e-3):
        trainer = Trainer(Options(image_spec, steps=1, batch=8, data=shapes, clip_grad=clip))
        trainer.setup()
        original = trainer.optimizer.step

        def recording_step(*args, clip=clip, trainer=trainer, original=original, **kwargs):
            grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
            norms[clip] = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
            return original(*args, **kwargs)

        monkeypatch.setattr(trainer.optimizer, "step", recording_step)
        trainer.run()
    assert norms[None] > 0.01  # the default with --data: 1.0, which these gradients do not reach
    assert norms[1e-3] <= 1e-3 * (1 + 1e-5)


# -- token files and your own dataset -------------------------------------------------------------------------


def test_a_token_file_gives_windows_with_next_token_targets(token_spec, tmp_path):
    from archspec.train.data import Needs, token_file
    from archspec.train.options import Options

    tokens = numpy.arange(101, dtype=numpy.int32) % 50
    path = tmp_path / "tokens.npy"
    numpy.save(path, tokens)
    import archspec

    report = archspec.check(token_spec)
    length = report.graph.inputs()[0].type.shape[1]
    needs = Needs(["ids"], ["__next__"], [length], "lm", 64)
    data = token_file(Options(token_spec, data=str(path), val_fraction=0.2), needs)
    assert (len(data.train), len(data.val)) == (9, 3)  # (101 - 1) // 8 = 12 windows of 8 + 1; the last 3 held out
    first = data.train[1]
    assert first["ids"].tolist() == list(range(8, 16)) and first["__next__"].tolist() == list(range(9, 17))
    last = data.val[2]
    assert last["ids"].tolist() == [t % 50 for t in range(88, 96)] and last["__next__"][-1] == 96 % 50


def test_a_token_file_trains_and_reports_perplexity(token_spec, tmp_path, capsys):
    tokens = numpy.tile(numpy.array([3, 1, 4, 1, 5, 9, 2, 6, 5], dtype=numpy.uint16), 60)
    path = tmp_path / "tokens.bin"
    tokens.tofile(path)
    summary = summary_of(capsys, token_spec, "--data", str(path), "--epochs", "4", "--batch", "8", "--lr", "1e-2")
    assert summary["data"] == {"kind": "tokens", "train": 60, "val": 7}
    evals = summary["evals"]
    assert len(evals) == 4 and all("perplexity" in e for e in evals)
    assert evals[-1]["perplexity"] < evals[0]["perplexity"] and evals[-1]["perplexity"] < 3  # vocabulary: 64


HOOK = """\
import torch
from torch.utils.data import Dataset


class Stripes(Dataset):
    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        image = torch.zeros(3, 16, 16)
        image[i % 2] = 1.0
        return image, i % 2


def make():
    return Stripes(40), Stripes(10)


class Rows(Stripes):  # as a Hugging Face dataset's rows: dicts keyed by column
    def __getitem__(self, i):
        image, label = super().__getitem__(i)
        return {"image": image, "label": label}


def rows():
    return Rows(40), Rows(10)


def one():
    return Stripes(40)


def wrong():
    return [(torch.zeros(3, 16, 16), 0, 1)]


def broken():
    raise RuntimeError("the bucket is gone")
"""


@pytest.fixture
def hook_folder(tmp_path, monkeypatch):
    (tmp_path / "my_stripes.py").write_text(HOOK)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_stripes", None)


def test_module_function_supplies_the_dataset(image_spec, hook_folder, capsys):
    pair = summary_of(capsys, image_spec, "--data", "my_stripes:make", "--epochs", "3", "--batch", "8")
    assert pair["data"] == {"kind": "hook", "train": 40, "val": 10} and pair["evals"][-1]["top1"] >= 0.9
    single = summary_of(capsys, image_spec, "--data", "my_stripes:one", "--steps", "2", "--batch", "4",
                        "--val-fraction", "0.25")
    assert single["data"] == {"kind": "hook", "train": 30, "val": 10}
    named = summary_of(capsys, image_spec, "--data", "my_stripes:rows", "--epochs", "3", "--batch", "8")
    assert named["data"] == {"kind": "hook", "train": 40, "val": 10} and named["evals"][-1]["top1"] >= 0.9


@pytest.mark.parametrize("function, code, words", [
    ("wrong", 1, ["--data my_stripes:wrong: its training items hold 3 value(s); this spec takes 2"]),
    ("broken", 1, ["broken() raised RuntimeError: the bucket is gone"]),
    ("absent", 2, ["my_stripes has no function absent"]),
])
def test_a_failing_hook_is_one_plain_line(image_spec, hook_folder, capsys, function, code, words):
    _, _, err = result = train(capsys, image_spec, "--data", f"my_stripes:{function}", "--steps", "1",
                               "--batch", "2")
    assert_plain_error(result[0], err, code, *words)


def test_a_hook_module_that_does_not_import_is_a_usage_error(image_spec, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = train(capsys, image_spec, "--data", "no_such_module_here:make")
    assert_plain_error(code, err, 2, "cannot import no_such_module_here")


# -- options and datasets that cannot be used --------------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--epochs", "0"], ["--epochs must be a whole number from 1 to 10,000"]),
    (["--epochs", "2", "--steps", "5"], ["give --steps or --epochs, not both"]),
    (["--warmup", "-1"], ["--warmup must be a whole number of steps from 0"]),
    (["--warmup", "30", "--steps", "20"], ["--warmup 30 is longer than the run's 20 steps"]),
    (["--val-fraction", "1.5"], ["--val-fraction must be a number from 0 to 0.9"]),
    (["--val-fraction", "nan"], ["--val-fraction must be a number from 0 to 0.9"]),
    (["--clip-grad", "-1"], ["--clip-grad must be a finite number >= 0"]),
    (["--clip-grad", "inf"], ["--clip-grad must be a finite number >= 0"]),
    (["--workers", "-1"], ["--workers must be a whole number from 0 to 64"]),
    (["--eval-every", "0"], ["--eval-every must be a whole number of steps from 1"]),
    (["--data", "/no/such/place"], ["--data: no such file or folder: /no/such/place"]),
], ids=["epochs-0", "epochs-and-steps", "warmup-negative", "warmup-too-long", "val-fraction-1.5",
        "val-fraction-nan", "clip-negative", "clip-inf", "workers-negative", "eval-every-0", "data-missing"])
def test_a_data_option_out_of_range_is_a_usage_error(image_spec, capsys, args, words):
    code, _, err = train(capsys, image_spec, *args)
    assert_plain_error(code, err, 2, *words)
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("missing", ["train", "val"])
def test_a_folder_without_train_or_val_is_a_usage_error(image_spec, shapes, tmp_path, capsys, missing):
    import shutil

    shutil.copytree(shapes, tmp_path / "data")
    shutil.rmtree(tmp_path / "data" / missing)
    code, _, err = train(capsys, image_spec, "--data", str(tmp_path / "data"))
    assert_plain_error(code, err, 2, f"has no {missing}/ folder", "ImageFolder layout")


def test_an_empty_class_folder_is_refused(image_spec, shapes, tmp_path, capsys):
    import shutil

    shutil.copytree(shapes, tmp_path / "data")
    (tmp_path / "data" / "val" / "blue_triangle").mkdir()
    code, _, err = train(capsys, image_spec, "--data", str(tmp_path / "data"))
    assert_plain_error(code, err, 1, "val/", "blue_triangle", "at least one image")


def test_more_classes_than_the_head_has_names_the_override(image_spec, tmp_path, capsys):
    make_shapes(str(tmp_path), classes=3, train=2, val=1, size=16)
    code, _, err = train(capsys, image_spec, "--data", str(tmp_path))
    assert_plain_error(code, err, 1, "3 classes, and the spec's head has 2", "--set classes=3")


def test_an_image_folder_without_the_train_extra_names_the_install(image_spec, shapes, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else real(name, *a))
    code, _, err = train(capsys, image_spec, "--data", shapes)
    assert_plain_error(code, err, 2, "needs timm", "pip install 'archspec-compiler[train]'")


def test_a_file_that_is_no_token_file_is_refused(image_spec, token_spec, tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert_plain_error(*train(capsys, image_spec, "--data", str(text))[::2], 2, "neither a folder nor a token file")
    big = tmp_path / "big.npy"
    numpy.save(big, numpy.full(40, 1000, dtype=numpy.int64))
    assert_plain_error(*train(capsys, token_spec, "--data", str(big))[::2], 1, "the token 1000",
                       "vocabulary of 64")
    assert_plain_error(*train(capsys, image_spec, "--data", str(big))[::2], 2, "a token file trains a spec with an "
                                                                                "lm head")


# -- sharded checkpoints (torch.distributed.checkpoint) ---------------------------------------------------------


def run_train(spec: str, *args: str, processes: int = 1) -> subprocess.CompletedProcess:
    flags = ["-m", "archspec.train", spec, "--batch", "4", "--json", *args]
    command = ([sys.executable, *flags] if processes == 1 else
               [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}", *flags])
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=dict(env, OMP_NUM_THREADS="1"))
    return result


@pytest.fixture(scope="module")
def sharded(request, image_spec, tmp_path_factory) -> str:
    """Two steps under torchrun with FSDP2 (two processes), saved as a DCP folder."""
    folder = str(scratch(request, tmp_path_factory, "dcp") / "state")
    result = run_train(image_spec, "--steps", "2", "--fsdp", "--save", folder, processes=2)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def test_a_sharded_folder_from_two_processes_resumes_in_one(image_spec, sharded, capsys):
    """Saved by two processes (each its half of every tensor), resumed by one: the third step's
    loss is the straight run's (the model loaded), and so is the fourth (AdamW's moments too)."""
    assert sorted(os.listdir(sharded)) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    straight = summary_of(capsys, image_spec, "--steps", "4", "--batch", "4")
    resumed = summary_of(capsys, image_spec, "--steps", "2", "--batch", "4", "--resume", sharded)
    assert resumed["first_step"] == 2 and resumed["losses"] == pytest.approx(straight["losses"][2:], abs=1e-5)


def test_each_process_validates_its_own_share_in_as_many_forwards_as_the_others():
    """Nine validation samples, --batch 4, two processes: rank 0 takes 0, 2, 4, 6, 8 (three
    batches), rank 1 takes 1, 3, 5, 7 (two, and one left-out forward to match rank 0's three)."""
    from archspec.train.data import Data, validation_batches
    from archspec.train.options import Options

    data = Data("hook", train=[0] * 4, val=list(range(9)))
    options = Options("spec.yaml", batch=4, workers=0)
    first, second = (validation_batches(data, options, rank, 2) for rank in (0, 1))
    assert [batch.tolist() for batch in first.loader] == [[0, 2], [4, 6], [8]]
    assert [batch.tolist() for batch in second.loader] == [[1, 3], [5, 7]]
    assert first.forwards == second.forwards == 3 and [b.tolist() for b in second.filler] == [[0]]
    alone = validation_batches(data, options, 0, 1)
    assert [batch.tolist() for batch in alone.loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]] and alone.forwards == 3
    assert validation_batches(Data("hook", train=[0], val=[]), options, 0, 2) is None


def test_two_fsdp_processes_validate_as_one_does(image_spec, tmp_path_factory):
    """Under torchrun with FSDP2 the two processes' sums make the one-process figures (nine
    samples: the processes' shares differ, so one runs a left-out forward; a mismatch would hang).
    Training augments at random per process, so the weights are kept as they start (lr 1e-12)."""
    folder = str(tmp_path_factory.mktemp("odd_shapes"))
    make_shapes(folder, classes=3, train=4, val=3, size=16, seed=2)
    flags = ("--data", folder, "--set", "classes=3", "--steps", "2", "--lr", "1e-12")  # the same weights in both
    alone, pair = run_train(image_spec, *flags), run_train(image_spec, *flags, "--fsdp", processes=2)
    assert alone.returncode == 0 and pair.returncode == 0, (  # the pair's head too: a rank's own error comes first
        alone.stderr[-2000:], pair.stderr[:4000], pair.stderr[-2000:])
    one, two = json.loads(alone.stdout)["evals"], json.loads(pair.stdout)["evals"]
    assert [e["val_samples"] for e in one] == [e["val_samples"] for e in two] == [9]
    assert two[0]["val_loss"] == pytest.approx(one[0]["val_loss"], abs=1e-4) and two[0]["top1"] == one[0]["top1"]


class Boom:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_crafted_metadata_cannot_run_code(image_spec, sharded, tmp_path, capsys, monkeypatch):
    import shutil

    folder = tmp_path / "crafted"
    shutil.copytree(sharded, folder)
    (folder / ".metadata").write_bytes(pickle.dumps(Boom()))
    monkeypatch.chdir(tmp_path)
    code, _, err = train(capsys, image_spec, "--steps", "1", "--batch", "2", "--resume", str(folder))
    assert_plain_error(code, err, 1, f"--resume {folder}: cannot read its .metadata safely",
                       "posix.system is not part of a checkpoint's metadata")
    assert not (tmp_path / "pwned").exists()


def test_a_sharded_folder_of_other_sizes_is_refused_before_loading(image_spec, sharded, capsys):
    code, _, err = train(capsys, image_spec, "--steps", "1", "--batch", "2", "--resume", sharded, "--set", "dim=24")
    assert_plain_error(code, err, 1, f"--resume {sharded}: model.patch_embed.proj.weight is [32, 3, 4, 4] in the "
                                     f"folder and [24, 3, 4, 4] in this run", "other --set sizes")
    code, _, err = train(capsys, image_spec, "--steps", "1", "--batch", "2", "--resume", os.path.dirname(sharded))
    assert_plain_error(code, err, 2, "is a folder without .metadata")



def test_a_sharded_folder_of_another_optimizer_is_refused(image_spec, sharded, capsys):
    code, _, err = train(capsys, image_spec, "--steps", "1", "--batch", "2", "--resume", sharded, "--optimizer", "sgd")
    assert_plain_error(code, err, 1, "holds optimizer state this run's optimizer does not keep",
                       "resume with the --optimizer the folder was saved with")


@pytest.mark.parametrize("target, words", [
    ("file", ["under --fsdp it writes a folder"]),
    ("stranger", ["holds files that --save did not write"]),
], ids=["a-file", "a-foreign-folder"])
def test_fsdp_save_needs_a_folder_of_its_own(image_spec, tmp_path, monkeypatch, target, words):
    from archspec.core.errors import UsageError
    from archspec.train.options import Options, check_options

    (tmp_path / "file").write_text("not a checkpoint")
    (tmp_path / "stranger").mkdir()
    (tmp_path / "stranger" / "notes.txt").write_text("mine")
    for name, value in zip(LAUNCH_VARIABLES, ("0", "1", "0", "localhost", "29500")):
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError) as caught:
        check_options(Options(image_spec, steps=1, batch=2, fsdp=True, save=str(tmp_path / target)))
    assert all(word in str(caught.value) for word in words), caught.value
