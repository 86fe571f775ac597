"""The activations abs, sign and log1p: sign(x) log(1 + |x|), the log-spaced relative
coordinates of timm's RelPosMlp (MaxViT's rmlp, CoAtNet), in three nodes where the MaxViT
user trial needed a telescoping sum of ~12 nodes; against torch, and through ONNX Runtime."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.cli import EXIT_OK, main

SIGNED_LOG = """
archspec: 1
name: signed_log
inputs:
  x: [B, 7, 2]
graph:
  - {id: magnitude, activation: {fn: abs}}
  - {id: logged, activation: {fn: log1p}}
  - {id: sign, from: x, activation: {fn: sign}}
  - {id: out, from: [sign, logged], multiply: {}}
outputs: [out]
"""


def test_sign_log1p_abs_is_timms_cr_coordinates():
    model = archspec.build_text(SIGNED_LOG)
    x = torch.arange(-3.0, 4.0)[None, :, None].expand(2, 7, 2)  # relative offsets -3 .. 3
    expected = torch.sign(x) * torch.log(1 + x.abs())  # timm's gen_relative_log_coords, mode 'cr'
    assert torch.equal(model(x), expected)


def test_they_export_to_onnx_and_agree_with_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    spec = tmp_path / "signed_log.yaml"
    spec.write_text(SIGNED_LOG)
    assert main(["build", str(spec), "--target", "onnx", "-o", str(tmp_path / "out")]) == EXIT_OK
