"""PiT-Ti (specs/pit_ti.yaml) against timm's `pit_ti_224`, and CrossViT-Ti
(specs/crossvit_tiny.yaml) against timm's `crossvit_tiny_240`: two architectures first written
from the docs alone, in a user trial, and then shipped.

PiT: an overlapping conv stem with a position table added on the image, and between stages a
pooling written as nodes: the class token through a `linear`, the grid through a grouped strided
`conv`, the two `concat`enated again. CrossViT: two branches, the second on the image resized
240 -> 224 (`resize`, bicubic, as timm's F.interpolate), joined in each multi-scale block by
cross-attention of one branch's class token over the other's patches (`kind: class`), the two
heads' logits averaged.

As in tests/parity/test_twins_eva.py, at a reduced size (fewer blocks, a smaller image, the same
overrides on the spec and timm's constructor): the reference built with pretrained=False, seeded
noise on every parameter, its state dict saved to a file and loaded with
`archspec.build(spec, weights=FILE)` alone (the spec names its mapping file). Parameter counts
agree (reference = module = checker), outputs agree within 1e-5 relative to the largest, FLOPs
agree with FlopCounterMode. The full-size parameter counts are checked by `archspec.check` alone.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, TimmPair, close, count_flops, images, param_count

timm = pytest.importorskip("timm")

# (spec, timm model, image size, overrides of the spec, the same for timm's constructor)
CASES = {
    "pit@112": ("pit_ti", "pit_ti_224", 112, {"img": 112, "depths": [1, 1, 1]},
                {"img_size": 112, "depth": [1, 1, 1]}),
    "crossvit@120": ("crossvit_tiny", "crossvit_tiny_240", 120, {"img": 120, "img1": 112, "depths": [1, 1]},
                     {"img_size": 120, "depth": [[1, 1, 0]] * 3}),
}

# The default (full-size) configurations: timm's parameter counts.
FULL_SIZE = {"pit_ti": 4_847_272, "crossvit_tiny": 7_014_800}

# A deliberately wrong variant of each spec, loaded with the same weights: the pooling conv
# without its padding (PiT; the pooled grids shift), the branch resized bilinearly (CrossViT).
WRONG = {"pit_ti": ("conv: {out: \"${dims[s]}\", kernel: 3, stride: 2, padding: 1,",
                    "conv: {out: \"${dims[s]}\", kernel: 3, stride: 2, padding: 0,"),
         "crossvit_tiny": ("resize: {size: \"${img1}\", mode: bicubic}", "resize: {size: \"${img1}\", mode: bilinear}")}


def spec_file(spec: str) -> str:
    return str(ROOT / "specs" / f"{spec}.yaml")


class Pair(TimmPair):
    """Reference and ours at one size (TimmPair: frozen, as PiT's expanded class token needs)."""

    def __init__(self, case: str, folder):
        self.name, timm_name, self.size, overrides, kwargs = CASES[case]
        super().__init__(spec_file(self.name), timm_name, folder, f"{case.replace('@', '-')}.pt", overrides, kwargs)


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, scratch(request, tmp_path_factory, "weights"))


@pytest.mark.parametrize("spec", list(FULL_SIZE))
def test_full_size_parameter_count(spec):
    assert archspec.check(spec_file(spec)).params == FULL_SIZE[spec]


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


def test_outputs_match(pair):
    image = images(2, pair.size)
    with torch.no_grad():
        theirs, ours = pair.ref(image), pair.ours(image)
    assert ours.shape == theirs.shape == (2, 1000)
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    measured = count_flops(lambda: pair.ref(images(1, pair.size)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


def test_a_wrong_variant_is_far_off(pair):
    """The checks can fail: the same weights in the spec with PiT's pooling conv unpadded, or
    CrossViT's second branch resized bilinearly, move the outputs far past the tolerance."""
    variant = pair.edited(WRONG[pair.name])
    image = images(1, pair.size)
    with torch.no_grad():
        assert close(pair.ref(image), pair.ours(image)) < TOL
        assert close(pair.ref(image), variant(image)) > 100 * TOL
