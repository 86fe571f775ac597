"""resize's `antialias`: torch's F.interpolate(antialias=True), which changes bicubic upsampling too
(timm's resample_abs_pos_embed resizes position tables so; the Hiera user trial's window
positions were 0.26 off without it). Against F.interpolate, up and down, bicubic and bilinear;
without it the output differs (the check can fail); with nearest it is a located error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import archspec
from archspec.core.errors import SpecError

SPEC = """\
archspec: 1
name: resized
params: {size: 13, mode: bicubic, antialias: true}
inputs:
  image: [B, 3, 8, 8]
graph:
  - {id: resized, resize: {size: "${size}", mode: "${mode}", antialias: "${antialias}"}}
"""


@pytest.mark.parametrize("size", [13, 5])
@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_as_torchs_antialias(size, mode):
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    model = archspec.build_text(SPEC, {"size": size, "mode": mode})
    want = F.interpolate(x, size=(size, size), mode=mode, antialias=True, align_corners=False)
    assert torch.allclose(model(x), want, atol=1e-6)
    if mode == "bicubic" or size < 8:  # bilinear upsampling is the same either way
        plain = archspec.build_text(SPEC, {"size": size, "mode": mode, "antialias": False})
        assert (plain(x) - want).abs().max() > 1e-3


def test_with_nearest_it_is_a_located_error():
    with pytest.raises(SpecError, match=r"<spec>:\d+:\d+: error: resized: antialias goes with mode: bilinear or "
                                        r"bicubic"):
        archspec.check_text(SPEC, {"mode": "nearest"})
