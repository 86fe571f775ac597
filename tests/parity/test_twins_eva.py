"""Twins-SVT-S (specs/twins_svt_s.yaml) against timm's `twins_svt_small`, and EVA-02-Ti/14
(specs/eva02_ti14.yaml) against timm's `eva02_tiny_patch14_224`: two architectures first written
from the docs alone, in a user trial, and then shipped.

Twins: window attention without a position bias (`bias: none`), global sub-sampled attention
(`kind: sra`, no reduction at sr_ratio 1), the PEG as a depthwise `conv` and an `add` after the
first block of each stage; at 256 the 64x64 grid is not a multiple of the window and timm pads it
(`pad: true`). EVA-02: 2-D rotary positions on the patch tokens (`rotary_grid`), q/v biases, a
SwiGLU MLP, the features head (mean of the patches, then a norm). At 168 the 12x12 grid takes
the rotary frequencies laid over timm's 16x16 reference grid.

As in tests/parity/test_cait.py: the reference built with pretrained=False, seeded noise on every
parameter, its state dict saved to a file and loaded with `archspec.build(spec, weights=FILE)`
alone (the spec names its mapping file). Parameter counts agree (reference = module = checker),
outputs agree within 1e-5 relative to the largest, FLOPs agree with FlopCounterMode at the
default size.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, images, param_count, perturb_everything

timm = pytest.importorskip("timm")

# (spec, timm model, image size, overrides of the spec, timm kwargs, parameter count at 224)
CASES = {
    "twins@224": ("twins_svt_s", "twins_svt_small", 224, None, {}, 24_060_776),
    "twins@256": ("twins_svt_s", "twins_svt_small", 256, {"img": 256, "pad": True}, {"img_size": 256}, None),
    "eva02@224": ("eva02_ti14", "eva02_tiny_patch14_224", 224, None, {}, 5_502_144),
    "eva02@168": ("eva02_ti14", "eva02_tiny_patch14_224", 168, {"img": 168}, {"img_size": 168}, None),
}


class Pair:
    """Reference and ours at one size; ours loaded from the reference's own state dict file."""

    def __init__(self, case: str, folder):
        self.spec, name, self.size, self.overrides, kwargs, self.params = CASES[case]
        torch.manual_seed(0)
        self.ref = perturb_everything(timm.create_model(name, pretrained=False, **kwargs).eval())
        self.weights = str(folder / f"{case.replace('@', '-')}.pt")
        torch.save(self.ref.state_dict(), self.weights)
        spec_path = str(ROOT / "specs" / f"{self.spec}.yaml")
        self.report = archspec.check(spec_path, self.overrides)
        self.ours = archspec.build(spec_path, self.overrides, weights=self.weights).eval()


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)
    if pair.params is not None:
        assert pair.report.params == pair.params


def test_outputs_match(pair):
    image = images(2, pair.size)
    with torch.no_grad():
        theirs, ours = pair.ref(image), pair.ours(image)
    assert ours.shape == theirs.shape and ours.shape[0] == 2
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    if pair.params is None:
        pytest.skip("FLOPs are compared at the default size")
    measured = count_flops(lambda: pair.ref(images(1, pair.size)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


ROTARY = 'scores: [{rotary_grid: {ref_grid: ["${ref}", "${ref}"]}}]'


def test_the_position_parts_matter(pair):
    """The checks can fail: the PEG's conv scaled in ours alone (Twins), or the same weights in
    the spec without its rotary positions (EVA-02), move the outputs far past the tolerance."""
    image = images(1, pair.size)
    with torch.no_grad():
        before = pair.ours(image)
        if pair.spec == "twins_svt_s":
            weight = pair.ours.get_parameter("stages.1.blocks.0.pos.conv.weight")
            kept = weight.clone()
            weight.mul_(3.0)
            after = pair.ours(image)
            weight.copy_(kept)
        else:
            text = (ROOT / "specs" / "eva02_ti14.yaml").read_text()
            assert ROTARY in text
            unrotated = archspec.build_text(text.replace(ROTARY, "scores: []"), pair.overrides, weights=pair.weights)
            after = unrotated.eval()(image)
    assert close(before, after) > 100 * TOL
