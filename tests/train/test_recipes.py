"""Issue 39, item 1: training recipes that fit the data (timm's train.py as the reference).

- Small images (<= 64 px) get no augmentation by default and never timm's 8%-area random-resized
  crop (--aug basic: a shift and flip); --aug none/basic/rand/trivial choose the augmentation.
- --mixup/--cutmix (timm's Mixup), --smoothing, --ema (evaluated beside the model) run; the EMA
  follows ema = decay * ema + (1 - decay) * weights.
- --save DIR/ keeps last.pt, best.pt (by validation) and epoch_N.pt (--save-every), each one a
  --resume file; metrics.jsonl (or --metrics FILE) holds a JSON line per evaluation.
- Every recipe option out of range is one plain usage error (exit 2, as every option of
  `archspec train`), never a traceback.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import scratch
from tests.train.test_train_data import IMAGES, assert_plain_error, train
from tests.train.train_data_shapes import make_shapes

pytestmark = pytest.mark.usefixtures("outside_torchrun")
METRIC_KEYS = {"epoch", "step", "train_loss", "val_loss", "top1", "lr", "seconds"}


@pytest.fixture(scope="module")
def image_spec(request, tmp_path_factory) -> str:
    path = scratch(request, tmp_path_factory, "spec") / "tiny_images.yaml"
    path.write_text(IMAGES)
    return str(path)


@pytest.fixture(scope="module")
def shapes(request, tmp_path_factory) -> str:
    """Red circles and green squares, 16x16: 8 per class to train on, 4 to validate."""
    out = str(scratch(request, tmp_path_factory, "shapes"))
    make_shapes(out, classes=2, train=8, val=4, size=16, seed=1)
    return out


# -- transforms that fit the images --------------------------------------------------------------------


def transform_names(transform) -> list[str]:
    return [type(t).__name__ for t in getattr(transform, "transforms", [transform])]


@pytest.mark.parametrize("aug", ["basic", "rand", "trivial"])
def test_small_images_get_no_random_resized_crop(aug):
    from archspec.train.data import image_transform

    names = transform_names(image_transform((32, 32), aug, training=True))
    assert not any("ResizedCrop" in n for n in names), names
    assert "RandomCrop" in names and "RandomHorizontalFlip" in names  # a shift by up to 1/8 and a flip
    assert {"rand": "RandAugment", "trivial": "TrivialAugmentWide"}.get(aug, "Normalize") in names, names
    assert not any("Crop" in n for n in transform_names(image_transform((32, 32), aug, training=False)))


def test_small_images_default_to_no_augmentation_and_large_ones_to_timms():
    from archspec.train.data import image_transform

    plain = ["Resize", "ToTensor", "Normalize"]
    assert transform_names(image_transform((32, 32), None, training=True)) == plain
    assert transform_names(image_transform((64, 48), "none", training=True)) == plain
    assert any("ResizedCrop" in n for n in transform_names(image_transform((224, 224), None, training=True)))
    assert any("CenterCrop" in n for n in transform_names(image_transform((224, 224), None, training=False)))


def test_a_small_image_is_shifted_never_zoomed():
    """A 16 px image through the training transform: the same pixels, moved by at most 1/8 (or
    mirrored), never an enlarged part of it as an 8% crop gives."""
    from PIL import Image

    from archspec.train.data import image_transform

    torch.manual_seed(0)
    image = Image.new("RGB", (16, 16), (0, 0, 0))
    image.putpixel((8, 8), (255, 255, 255))  # one white pixel
    transform = image_transform((16, 16), "basic", training=True)
    for _ in range(20):
        out = transform(image)  # [3, 16, 16]
        white = (out[0] > 0).nonzero()
        assert len(white) == 1, white  # one pixel still: not zoomed
        y, x = white[0].tolist()
        assert abs(y - 8) <= 2 and (abs(x - 8) <= 2 or abs(x - 7) <= 2)


# -- the recipe's options ---------------------------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--aug", "fancy"], ["--aug must be one of none, basic, rand, trivial", "'fancy'"]),
    (["--mixup", "-1"], ["--mixup must be a number from 0 (off) to 10"]),
    (["--cutmix", "nan"], ["--cutmix must be a number from 0 (off) to 10"]),
    (["--mixup", "0.2", "--batch", "3"], ["--batch must be even per process, got 3"]),
    (["--smoothing", "1"], ["--smoothing must be a number from 0 (off) to below 1"]),
    (["--ema", "1.5"], ["--ema must be a decay between 0 and 1"]),
    (["--ema", "0"], ["--ema must be a decay between 0 and 1"]),
    (["--save-every", "2"], ["--save-every keeps epoch_N.pt in a checkpoint folder: give --save DIR/"]),
], ids=["aug", "mixup", "cutmix", "odd-batch", "smoothing", "ema-over-1", "ema-0", "save-every-alone"])
def test_a_recipe_option_out_of_range_is_a_usage_error(image_spec, shapes, capsys, args, words):
    code, _, err = train(capsys, image_spec, "--data", shapes, "--steps", "1", "--batch", "2", *args)
    assert_plain_error(code, err, 2, *words)


def test_mixup_on_a_spec_without_a_classify_head_is_a_usage_error(capsys, tmp_path):
    from tests.train.test_train_data import TOKENS

    spec = tmp_path / "tokens.yaml"
    spec.write_text(TOKENS)
    code, _, err = train(capsys, str(spec), "--data", "tests.train.test_recipes:no_data", "--steps", "1",
                         "--batch", "2", "--mixup", "0.2")
    assert_plain_error(code, err, 2, "--mixup/--cutmix mix images: they need a classify head")


def no_data():  # --data tests.train.test_recipes:no_data: never read (the options are refused first)
    raise AssertionError("read")


# -- EMA --------------------------------------------------------------------------------------------------


def test_the_ema_moves_toward_the_weights_by_one_minus_the_decay():
    from archspec.train.recipe import Ema

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = Ema(model, 0.9)
    before = {k: v.clone() for k, v in ema.module.state_dict().items()}
    with torch.no_grad():
        model[0].weight.add_(1.0)
    model.train()(torch.randn(4, 3))  # running stats and num_batches_tracked move
    ema.update(model)
    after = ema.module.state_dict()
    torch.testing.assert_close(after["0.weight"], 0.9 * before["0.weight"] + 0.1 * model[0].weight)
    torch.testing.assert_close(after["1.running_mean"], 0.9 * before["1.running_mean"] + 0.1 * model[1].running_mean)
    assert int(after["1.num_batches_tracked"]) == 1  # an integer buffer is copied
    assert not any(p.requires_grad for p in ema.module.parameters())


def test_soft_targets_and_smoothing_give_timms_losses():
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

    from archspec.train.recipe import training_loss

    logits, labels = torch.randn(4, 5), torch.tensor([0, 3, 1, 4])
    soft = torch.softmax(torch.randn(4, 5), -1)
    torch.testing.assert_close(training_loss(logits, soft, 0.0), SoftTargetCrossEntropy()(logits, soft))
    torch.testing.assert_close(training_loss(logits, labels, 0.1), LabelSmoothingCrossEntropy(0.1)(logits, labels))


# -- a run: checkpoints, metrics, progress ---------------------------------------------------------------------


def test_a_run_keeps_last_best_and_every_epoch_and_writes_metrics(image_spec, shapes, capsys, tmp_path):
    folder = tmp_path / "run"
    code, out, err = train(capsys, image_spec, "--data", shapes, "--epochs", "2", "--batch", "4", "--ema", "0.9",
                           "--mixup", "0.2", "--cutmix", "1.0", "--smoothing", "0.1", "--aug", "trivial",
                           "--save", f"{folder}/",
                           "--save-every", "1", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert sorted(p.name for p in folder.iterdir()) == ["best.pt", "epoch_1.pt", "epoch_2.pt", "last.pt",
                                                        "metrics.jsonl"]
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2] and all(METRIC_KEYS | {"ema_top1"} <= set(line)
                                                               for line in lines)
    assert [line["top1"] for line in lines] == [e["top1"] for e in summary["evals"]]
    assert "EMA val loss" in err and err.count("val loss") == 2 * len(summary["evals"])  # --json drops none
    last = torch.load(folder / "last.pt", weights_only=True)
    best = torch.load(folder / "best.pt", weights_only=True)
    assert last["step"] == summary["last_step"] and set(last["ema"]) == set(last["model"])
    assert best["metric"] == max(line["ema_top1"] for line in lines)  # by the EMA's top-1, as timm
    assert f"kept best.pt, last.pt, epoch_1.pt, epoch_2.pt in {folder}/" in err

    code, out, err = train(capsys, image_spec, "--data", shapes, "--epochs", "3", "--batch", "4", "--ema", "0.9",
                           "--resume", str(folder), "--save", f"{folder}/", "--json")
    assert code == 0, err
    assert f"resumed from {folder}: model and optimizer at step {last['step']}" in err
    assert json.loads(out)["first_step"] == last["step"]
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 3  # appended
    code, _, err = train(capsys, image_spec, "--data", shapes, "--steps", "1", "--batch", "4",
                         "--resume", str(folder / "best.pt"))
    assert code == 0, err


def test_metrics_file_without_a_checkpoint_folder(image_spec, shapes, capsys, tmp_path):
    metrics = tmp_path / "m.jsonl"
    code, _, err = train(capsys, image_spec, "--data", shapes, "--epochs", "1", "--batch", "4", "--aug", "none",
                         "--metrics", str(metrics))
    assert code == 0, err
    (line,) = [json.loads(text) for text in metrics.read_text().splitlines()]
    assert METRIC_KEYS <= set(line) and line["epoch"] == 1 and line["seconds"] > 0


def test_a_folder_without_a_trailing_slash_says_how_to_keep_checkpoints(image_spec, shapes, capsys, tmp_path):
    code, _, err = train(capsys, image_spec, "--data", shapes, "--steps", "1", "--batch", "2", "--save", str(tmp_path))
    assert_plain_error(code, err, 2, "is a folder; give a file name inside it", f"or {tmp_path}/ (a trailing /)")


def test_the_cli_entry_parses_every_recipe_flag():
    import argparse

    from archspec.train import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["x.yaml", "--aug", "trivial", "--mixup", "0.8", "--cutmix", "1", "--smoothing", "0.1",
                              "--ema", "0.999", "--save", "runs/", "--save-every", "5", "--metrics", "m.jsonl"])
    assert args.aug == "trivial" and args.ema == 0.999 and args.save_every == 5
    from archspec.train.options import Options

    options = Options("x.yaml", **{k: getattr(args, k) for k in ("aug", "mixup", "cutmix", "smoothing", "ema",
                                                                 "save", "save_every", "metrics")})
    assert options.save_folder == "runs/" and options.metrics_file == "m.jsonl" and options.mixing
