"""The build's export check where eager itself gives NaN (the ESM-2 trial: a random 0/1 mask
hid every key of a row, 0/0 in the model, and the check printed `max |export - eager| nan` and
passed in silence): NaN in both at one place agrees, NaN in one alone does not, and the build
line says how many of eager's values are not finite."""

from __future__ import annotations

import math

import torch

from archspec.cli.main import main
from archspec.compiler.backends.export import max_abs_difference

NAN_ROWS = """name: nan_rows
inputs:
  x: [B, 4, 8]
graph:
  - {id: zero, from: [x, x], subtract: {}}
  - {id: ratio, from: [zero, zero], divide: {}}
outputs: [ratio]
"""


def test_nan_in_both_agrees_and_in_one_alone_does_not():
    a = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert max_abs_difference(a, a.clone()) == 0.0
    assert max_abs_difference(a, torch.tensor([1.5, float("nan"), float("inf"), 2.0])) == 0.5
    assert math.isnan(max_abs_difference(a, torch.tensor([1.0, 0.0, float("inf"), 2.0])))
    assert max_abs_difference(a, torch.tensor([1.0, float("nan"), 0.0, 2.0])) == float("inf")


def test_the_build_says_eager_gives_nan_at_the_checks_inputs(tmp_path, capsys):
    (tmp_path / "nan_rows.yaml").write_text(NAN_ROWS)
    assert main(["build", str(tmp_path / "nan_rows.yaml"), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "max |export - eager| 0.00e+00" in out
    assert "eager itself gives NaN or infinity at" in out and "the program the same there" in out


def test_the_onnx_line_says_eager_gives_nan_at_the_checks_inputs(tmp_path, capsys):
    """The ONNX build checked the same outputs and said nothing of their NaN (stop 53's list)."""
    (tmp_path / "nan_rows.yaml").write_text(NAN_ROWS)
    assert main(["build", str(tmp_path / "nan_rows.yaml"), "--target", "onnx", "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "max |onnxruntime - eager| 0.00e+00" in out
    assert "eager itself gives NaN or infinity at 96 of 96 output values" in out
