"""unfold and fold (issue 35): torch's F.unfold / F.fold over an image (kernel, stride, padding,
dilation). Against torch: outputs, node shapes, FLOPs; VOLO's outlook aggregation (unfold the
values, weight each pixel's 3x3 neighbourhood, fold back) in five nodes; located errors; the
exports (torch.export with a dynamic batch, ONNX against onnxruntime, TensorRT's operator
coverage).

Small specs; all CPU fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.compiler.backends.export import export_program
from archspec.compiler.backends.onnx import export_onnx

from tests.primitives.test_every_op import TOL

from tests.conftest import build_counted, checks_shapes, checks_tensorrt_coverage

FOLDS = """
name: fold_ops
inputs:
  image: [B, 8, 6, 6]
graph:
  - {id: cols, unfold: {kernel: 3, padding: 1}}
  - {id: back, fold: {size: 6, kernel: 3, padding: 1}}
  - {id: strided, from: image, unfold: {kernel: [2, 3], stride: 2, dilation: [1, 2]}}
  - {id: strided_back, fold: {size: [6, 6], kernel: [2, 3], stride: 2, dilation: [1, 2]}}
  - {id: weights, from: image, conv: {out: 9, kernel: 1}}
  - {id: attn, softmax: {axis: 1}}
  - {id: per_pixel, rearrange: {pattern: "b k h w -> b 1 k (h w)"}}
  - {id: split, from: cols, rearrange: {pattern: "b (c k) l -> b c k l", sizes: {k: 9}}}
  - {id: weighted, from: [split, per_pixel], multiply: {}}
  - {id: merged, rearrange: {pattern: "b c k l -> b (c k) l"}}
  - {id: outlook, fold: {size: 6, kernel: 3, padding: 1}}
outputs: [cols, back, strided, strided_back, outlook]
"""


def reference(model, image):
    cols = F.unfold(image, 3, padding=1)  # [B, 72, 36]
    strided = F.unfold(image, (2, 3), dilation=(1, 2), stride=2)
    attn = model.weights.conv(image).softmax(1)  # [B, 9, 6, 6]
    weighted = cols.reshape(image.shape[0], 8, 9, 36) * attn.flatten(2).unsqueeze(1)  # VOLO: each pixel's 3x3
    return (cols, F.fold(cols, 6, 3, padding=1), strided, F.fold(strided, 6, (2, 3), dilation=(1, 2), stride=2),
            F.fold(weighted.flatten(1, 2), 6, 3, padding=1))


def test_against_torch_unfold_and_fold():
    report, model = build_counted(FOLDS)
    image = torch.randn(2, 8, 6, 6)
    for name, got, want in zip(report.outputs, model(image), reference(model, image), strict=True):
        assert got.shape == want.shape and torch.allclose(got, want, atol=TOL), name
    checks_shapes(report, model, (image,))


def test_the_types():
    report = archspec.check_text(FOLDS)
    t = report.graph.type_of
    assert t("cols").layout == "tensor" and t("cols").shape[1:] == (72, 36)
    assert t("strided").shape[1:] == (48, 3)  # 3 rows of blocks, 1 column (a dilated 3-wide block spans 5)
    assert t("back").layout == "image" and t("back").shape[1:] == (8, 6, 6)
    assert t("outlook").shape[1:] == (8, 6, 6)


def test_a_constant_stays_a_batch_of_1():
    report = archspec.check_text("name: c\ninputs:\n  x: [B, 4]\ngraph:\n"
                                 "  - {id: c, constant: {shape: [2, 4, 4], fill: ones}}\n"
                                 "  - {id: img, rearrange: {pattern: 'b c h w -> b c h w', as: image}}\n"
                                 "  - {id: cols, unfold: {kernel: 2, stride: 2}}\n"
                                 "  - {id: back, fold: {size: 4, kernel: 2, stride: 2}}\noutputs: [back]\n")
    assert report.graph.type_of("cols").shape == (1, 8, 4) and report.graph.type_of("back").shape == (1, 2, 4, 4)


def test_params_and_flops():
    report, model = build_counted(FOLDS)
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.randn(1, 8, 6, 6))
    assert report.params == 8 * 9 + 9
    assert counter.get_total_flops() == report.flops == 2 * 8 * 9 * 36  # the 1x1 conv alone


def test_exports_with_a_dynamic_batch():
    report, model = build_counted(FOLDS)
    program = export_program(model, report.graph)
    image = torch.randn(5, 8, 6, 6)  # not the batch it was traced with
    with torch.no_grad():
        for got, want in zip(program.module()(image), model(image), strict=True):
            assert torch.allclose(got, want, atol=TOL)


def test_onnx_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    report, model = build_counted(FOLDS)
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_unfold_and_fold(tmp_path, capsys):
    checks_tensorrt_coverage(FOLDS, tmp_path, capsys, batch="1:4:16")


@pytest.mark.parametrize("node, message, hint", [
    ("{from: x, unfold: {kernel: 3}}", "unfold reads an image [B, C, H, W], got a token sequence [B, 6, 8]",
     "to_image turns a token grid into an image"),
    ("{from: image, unfold: {kernel: 7}}", "unfold: a block of 7 (dilation 1: 7 pixels) is larger than the 6x6 image "
                                           "padded to 6", "smaller kernel"),
    ("{from: image, unfold: {kernel: 3, dilation: 3}}", "a block of 3 (dilation 3: 7 pixels)", None),
    ("{from: image, unfold: {kernel: 0}}", "kernel", None),
    ("{from: x, fold: {size: 4, kernel: 3}}", "fold: 6 rows are not a multiple of the kernel's 3x3 = 9", None),
    ("{from: cols, fold: {size: 7, kernel: 3, padding: 1}}",
     "fold: 36 columns, but 7x7 = 49 blocks fit a 7x7 image", "the size of the image the columns were unfolded from"),
    ("{from: image, fold: {size: 6, kernel: 3}}", "fold reads columns [B, C*kh*kw, L], got an image", None),
    ("{from: cols, fold: {kernel: 3}}", "size", None),
])
def test_bad_parameters_are_located_errors(node, message, hint):
    text = ("name: bad\ninputs:\n  image: [B, 8, 6, 6]\n  x: [B, 6, 8]\ngraph:\n"
            "  - {id: cols, from: image, unfold: {kernel: 3, padding: 1}}\n"
            f"  - {node}\n")
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert d.loc is not None and d.loc.line == 7
    if hint:
        assert hint in (d.hint or ""), d.hint


def test_the_fold_module_is_torch_fold_at_any_geometry():
    """compiler/modules/fold.py adds shifted blocks (TensorRT converts it; col2im it does not):
    the same as F.fold over kernels, strides that do or do not divide, paddings and dilations."""
    import random

    from archspec.compiler.modules.fold import Fold

    rng, tried = random.Random(0), 0
    while tried < 60:
        h, w, kh, kw = rng.randint(3, 9), rng.randint(3, 9), rng.randint(1, 3), rng.randint(1, 3)
        sh, sw, ph, pw, dh, dw = (rng.randint(1, 3), rng.randint(1, 3), rng.randint(0, 2), rng.randint(0, 2),
                                  rng.randint(1, 2), rng.randint(1, 2))
        lh, lw = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if lh < 1 or lw < 1:
            continue
        x = torch.randn(2, 3 * kh * kw, lh * lw)
        want = F.fold(x, (h, w), (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))
        got = Fold((h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw), (lh, lw))(x)
        assert torch.allclose(got, want, atol=TOL), (h, w, kh, kw, sh, sw, ph, pw, dh, dw)
        tried += 1
