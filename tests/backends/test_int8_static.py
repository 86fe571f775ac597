"""Static int8 quantization (`build --target onnx --precision int8 --calibration random|DIR`):
ONNX Runtime's QDQ quantization of the linear layers, calibrated on random inputs or a folder of
images, its deviation measured like the dynamic one's."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from archspec.cli import main
from archspec.pipeline import check_file

from tests.conftest import ROOT

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

VIT = str(ROOT / "specs" / "vit_ti16.yaml")
TINY_VIT = ["--set", "img=32", "--set", "depth=2", "--set", "classes=3"]
TINY_LM = str(ROOT / "specs" / "examples" / "tiny_lm.yaml")


def build(capsys, tmp_path, *args):
    code = main(["build", VIT, *TINY_VIT, "--target", "onnx", "--precision", "int8", "-o", str(tmp_path / "out"),
                 *args])
    return code, capsys.readouterr().err


def image_folder(root, classes=("red", "blue"), each=4):
    from PIL import Image

    for c, colour in enumerate(classes):
        (root / colour).mkdir(parents=True)
        for i in range(each):
            Image.new("RGB", (40, 40), ((200, 30 + i, 30), (30, 30 + i, 200))[c]).save(root / colour / f"{i}.png")
    return root


def ops(path) -> Counter:
    return Counter(node.op_type for node in onnx.load(str(path)).graph.node)


def run(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_random_calibration_writes_a_static_qdq_model_that_stays_close_to_fp32(tmp_path, capsys):
    code, err = build(capsys, tmp_path, "--calibration", "random")
    assert code == 0, err
    out = tmp_path / "out"
    counted = ops(out / "model.int8.onnx")
    assert counted["QuantizeLinear"] > 0 and counted["DequantizeLinear"] > 0  # static: QDQ pairs
    assert counted["DynamicQuantizeLinear"] == 0 and counted["MatMulInteger"] == 0  # not the dynamic form
    precision = json.loads((out / "precision.json").read_text())
    assert precision["method"] == "static" and precision["calibration"] == "32 random inputs"
    assert "9 of 9 MatMul/Gemm quantized to int8 (static" in precision["notes"][0]
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    fp32, int8 = run(out / "model.onnx", x), run(out / "model.int8.onnx", x)
    gap = float(np.abs(int8 - fp32).max())
    assert 0 < gap < 0.2 * float(np.abs(fp32).max())  # quantized, and still the same network
    assert precision["deviation"]["max_abs"] > 0 and precision["deviation"]["top1_total"] == 64


def test_without_calibration_int8_stays_dynamic(tmp_path, capsys):
    code, err = build(capsys, tmp_path)
    assert code == 0, err
    assert ops(tmp_path / "out" / "model.int8.onnx")["QuantizeLinear"] == 0
    assert json.loads((tmp_path / "out" / "precision.json").read_text())["method"] == "dynamic"


def test_a_folder_of_images_calibrates(tmp_path, capsys):
    folder = image_folder(tmp_path / "images")
    code, err = build(capsys, tmp_path, "--calibration", str(folder))
    assert code == 0, err
    precision = json.loads((tmp_path / "out" / "precision.json").read_text())
    assert precision["method"] == "static" and precision["calibration"] == str(folder)


def test_calibration_batches_are_repeatable_and_spread_over_the_classes(tmp_path):
    from archspec.compiler.backends.calibration import calibration

    graph = check_file(VIT, {"img": 32, "depth": 2, "classes": 3}).graph
    first, again = calibration(graph, "random", samples=10), calibration(graph, "random", samples=10)
    assert [b[0].shape[0] for b in first.batches] == [4, 4, 2] and first.samples == 10
    assert all((a[0] == b[0]).all() for a, b in zip(first.batches, again.batches))
    folder = image_folder(tmp_path / "images")
    images = calibration(graph, str(folder), samples=4).batches[0][0]  # [4, 3, 32, 32]
    assert images.shape == (4, 3, 32, 32)
    reds = (images[:, 0].mean((1, 2)) > images[:, 2].mean((1, 2))).sum()
    assert reds == 2  # two of each class, not the first four files (all red)


def test_lm_token_ids_are_drawn_over_the_vocabulary():
    from archspec.compiler.backends.calibration import calibration
    from archspec.compiler.backends.export import value_bound

    graph = check_file(TINY_LM).graph
    ids = calibration(graph, "random", samples=4).batches[0][0]
    bound = value_bound(graph, graph.inputs()[0].name)
    assert ids.dtype.is_floating_point is False and 0 <= int(ids.min()) and int(ids.max()) < bound
    assert len(ids.unique()) > 16  # drawn, not one repeated example


@pytest.mark.parametrize("args, words", [
    (["--calibration", "random", "--precision", "fp32"], "--calibration calibrates int8 static quantization: it "
                                                          "goes with --precision int8"),
    (["--calibration", "/no/such/folder"], "--calibration /no/such/folder: no such folder"),
])
def test_calibration_usage_errors(tmp_path, capsys, args, words):
    code = main(["build", VIT, *TINY_VIT, "--target", "onnx", "--precision", "int8", "-o", str(tmp_path / "o"),
                 *args])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err


def test_a_folder_of_images_cannot_calibrate_a_language_model_and_says_so_before_building(tmp_path, capsys):
    folder = image_folder(tmp_path / "images")
    code = main(["build", TINY_LM, "--target", "onnx", "--precision", "int8", "--calibration", str(folder),
                 "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "a folder of images calibrates a spec whose one input is an image" in err
    assert "[2/" not in err  # refused right after the check, before the model is made
