"""`drop_path` as an op of its own: stochastic depth on a residual branch written out of ops
(CAFormer's and FocalNet's trials wrote such branches, which then trained without the
reference's stochastic depth). Against timm's DropPath under one seed, in training and in eval."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """
name: branch
inputs: {x: [B, 8, 32]}
graph:
  - {id: fc, linear: {dim: 32}}
  - {id: dropped, drop_path: {rate: 0.3}}
  - {id: out, from: [x, dropped], add: {}}
"""


def test_training_drops_whole_samples_as_timms_drop_path():
    timm = pytest.importorskip("timm")
    from timm.layers import DropPath

    model = archspec.build_text(SPEC).train()
    assert archspec.check_text(SPEC).params == sum(p.numel() for p in model.parameters())
    x = torch.randn(64, 8, 32)
    branch = model.fc(x)
    torch.manual_seed(3)
    ours = model(x)
    torch.manual_seed(3)
    theirs = x + DropPath(0.3).train()(branch)
    assert (ours - theirs).abs().max() < 1e-6  # the same samples dropped (x * mask / keep: rounding apart)
    dropped = (ours - x).flatten(1).abs().amax(dim=1) == 0  # samples whose branch was dropped
    assert 0 < int(dropped.sum()) < 64  # some dropped, not all


def test_eval_is_the_identity():
    model = archspec.build_text(SPEC).eval()
    x = torch.randn(4, 8, 32)
    with torch.no_grad():
        assert torch.equal(model(x), x + model.fc(x))


def test_rate_out_of_range_is_a_located_error():
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(SPEC.replace("rate: 0.3", "rate: 1.5"))
    assert info.value.loc is not None and info.value.loc.line == 6
