"""The pad op (archspec/primitives/ops/pad.py, compiler/modules/pad.py) against torch's F.pad
called here from the definition: up to a multiple at the bottom and right (timm's DaViT and Swin
pad an odd grid so before a stride-2 conv), by given amounts on each side, on an image and on a
token grid; every node's shape against the checker's; located errors; torch.export with a
dynamic batch and with a dynamic image size (odd and even sides in one program), ONNX Runtime
and TensorRT's operator coverage.

Small specs; all CPU fp32."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.compiler.backends.export import SizeRange, example_inputs, export_program, max_abs_difference

from tests.conftest import checks_tensorrt_coverage, run_capturing

TOL = 1e-5

EVERYTHING = """
name: p
params:
  img: 25
inputs:
  image: [B, 3, img, img]
graph:
  - {id: even, pad: {to_multiple: 2}}                          # [B, 3, 26, 26] (timm's F.pad(x, (0, 1, 0, 1)))
  - {id: down, conv: {out: 8, kernel: 2, stride: 2}}            # [B, 8, 13, 13]
  - {id: framed, pad: {sides: [1, 2, 0, 3], value: -1.5}}       # [B, 8, 16, 16]
  - {id: tokens, to_tokens: {}}                                 # [B, 256, 8] on the 16x16 grid
  - {id: by_seven, pad: {to_multiple: [7, 5]}}                  # [B, 21 * 20, 8] on the 21x20 grid
outputs: [framed, by_seven]
"""


def build(text: str, overrides=None):
    report = archspec.check_text(text, overrides)
    model = archspec.build_text(text, overrides, seed=0).eval()
    return report, model


def reference(model, x):
    """EVERYTHING from its definition: F.pad's (left, right, top, bottom)."""
    even = F.pad(x, (0, -x.shape[3] % 2, 0, -x.shape[2] % 2))
    down = F.conv2d(even, model.down.conv.weight, model.down.conv.bias, stride=2)
    framed = F.pad(down, (0, 3, 1, 2), value=-1.5)
    h, w = framed.shape[2:]
    grid = F.pad(framed, (0, -w % 5, 0, -h % 7))  # the token grid padded as an image
    return framed, grid.flatten(2).transpose(1, 2)


@pytest.mark.parametrize("img", [25, 24, 31])
def test_pad_is_f_pad_and_every_shape_is_the_checkers(img):
    report, model = build(EVERYTHING, {"img": img})
    x = torch.randn(2, 3, img, img)
    with torch.no_grad():
        for got, want in zip(model(x), reference(model, x), strict=True):
            assert got.shape == want.shape and max_abs_difference(got, want) < TOL
    _, outputs = run_capturing(model, (x,))
    for name, out in outputs.items():
        expected = [2 if str(d) == "B" else d for d in report.graph.type_of(name).shape]
        assert list(out.shape) == expected, name
    side = (img + 1) // 2 + 3  # framed: [B, 8, side, side]
    assert report.graph.type_of("by_seven").grid == (-(-side // 7) * 7, -(-side // 5) * 5)
    assert report.flops == model.down.conv.weight.numel() * 2 * ((img + 1) // 2) ** 2  # the conv only


def test_an_even_side_is_not_padded():
    report, _ = build(EVERYTHING, {"img": 24})
    assert report.graph.type_of("even").shape == report.graph.type_of("image").shape


@pytest.mark.parametrize("node, message, hint", [
    ("{pad: {}}", "pad takes `to_multiple` or `sides`, one of them", "to_multiple: 2 pads the bottom and right"),
    ("{pad: {to_multiple: 2, sides: [0, 1, 0, 1]}}", "pad takes `to_multiple` or `sides`, one of them", None),
    ("{pad: {sides: [1, 1]}}", "`sides`", None),
    ("{pad: {to_multiple: 0}}", "to_multiple", None),
])
def test_bad_parameters_are_located_errors(node, message, hint):
    text = f"name: t\ninputs:\n  image: [B, 3, 8, 8]\ngraph:\n  - {node}\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text, name="bad.yaml")
    error = info.value
    assert message in error.message
    assert hint is None or hint in error.hint
    assert (error.loc.file, error.loc.line) == ("bad.yaml", 5)


def test_class_tokens_are_refused_at_the_node():
    text = """
name: t
inputs:
  image: [B, 3, 32, 32]
graph:
  - {id: patches, patchify: {patch: 8, dim: 16, cls_token: true}}
  - {id: padded, pad: {to_multiple: 3}}
"""
    with pytest.raises(archspec.SpecError, match="pad needs a token grid without class tokens") as info:
        archspec.check_text(text, name="bad.yaml")
    assert info.value.loc.line == 7


def test_export_takes_any_batch_and_any_image_size_odd_or_even():
    """One program for sides 20 to 31: the padding follows each input's size."""
    report, model = build(EVERYTHING, {"img": 24})
    program = export_program(model, report.graph, size_range=SizeRange(20, 31, 1)).module()
    for batch, img in ((1, 24), (3, 25), (2, 31)):
        x = torch.randn(batch, 3, img, img)
        eager = archspec.build_text(EVERYTHING, {"img": img}, seed=0).eval()
        with torch.no_grad():
            got = program(x)
            assert max_abs_difference(got, eager(x)) < TOL


def test_onnx_runtime_agrees_with_eager(tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.onnx import export_onnx

    report, model = build(EVERYTHING)
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another
    assert example_inputs(report.graph, batch=3)[0].shape == (3, 3, 25, 25)


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_pad(tmp_path, capsys):
    checks_tensorrt_coverage(EVERYTHING, tmp_path, capsys)
