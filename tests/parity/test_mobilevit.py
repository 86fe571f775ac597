"""MobileViT-XS (specs/mobilevit_xs.yaml) against timm's `mobilevit_xs` (ByobNet): first written
from the docs alone in a user trial, then shipped.

A conv network (MobileNetV2 inverted residuals, ConvNormAct with BatchNorm and SiLU) in which
three stages end with a MobileViT block: the map unfolded into 2x2 patches, transformer blocks
over the pixels that share a position within their patch, folded back. The spec writes the
unfold as a `rearrange` that gathers each position-within-patch into one quadrant of the grid,
`b c (nh ph) (nw pw) -> b c (ph nh) (pw nw)`, and the attention as window attention whose window
is half the grid (no position bias): each window is one of timm's [B * 4, patches, C] sequences.
A side that is no multiple of the patch is `resize`d up bilinearly before the unfold and back
after the fold, as timm's F.interpolate.

As in tests/parity/test_pit_crossvit.py, at reduced image sizes (the same override on the spec;
timm's MobileViT runs any size): the reference built with pretrained=False, seeded noise on
every parameter and on the BatchNorms' running statistics (what eval reads; the variances kept
positive), its state dict saved to a file and loaded with `archspec.build(spec, overrides,
weights=FILE)` alone (the spec names its mapping file). At 96 the MobileViT blocks see 12x12,
6x6 and 3x3 maps (the last odd: resized to 4x4 and back), at 100 13x13, 7x7 (both resized) and
4x4. Parameter counts agree (reference = module = checker, and timm's at the full size), the
outputs agree within 1e-5 relative to the largest (eval, and in training mode, where the
BatchNorms use the batch's statistics), FLOPs agree with FlopCounterMode (at the full size too).
The checks can fail: variants that build from the same weights (the quadrants in another order,
windows of neighbouring pixels, the resize by nearest neighbour) are far off. timm's other sizes
(mobilevit_xxs, mobilevit_s) load into the spec with the `--set`s its header gives and match too,
and the mapping's `identify` claims MobileViT's checkpoints and no other shipped naming does.
"""

from __future__ import annotations

import copy

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.weights.test_mapping_identify import shipped_namings, timm_keys
from tests.parity.test_vocabulary import (FLOPS_REL, TOL, TimmPair, check_full_size, close, count_flops, images, param_count,
                                     perturb_batch_norms, perturb_everything)

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "mobilevit_xs.yaml")
SIZES = [96, 100]  # MobileViT maps 12, 6, 3 (odd: resized) and 13, 7 (resized), 4
FULL_SIZE = 2_317_848  # timm's mobilevit_xs

# Variants of the spec that build and load the same weights but compute something else.
UNFOLD = 'pattern: "b c (nh ph) (nw pw) -> b c (ph nh) (pw nw)"'
FOLD = 'pattern: "b c (ph nh) (pw nw) -> b c (nh ph) (nw pw)"'
WRONG = {
    # the unfold sends the pixel at (ph, pw) of each patch to quadrant (pw, ph) and the fold still
    # undoes the right order: the same windows attend, the map comes back transposed in each patch
    "quadrants transposed": [(UNFOLD, 'pattern: "b c (nh ph) (nw pw) -> b c (pw nh) (ph nw)"')],
    # no gathering at all: each window a block of neighbouring pixels (Swin's windows)
    "windows of neighbours": [(UNFOLD, 'pattern: "b c (nh ph) (nw pw) -> b c (nh ph) (nw pw)"'),
                              (FOLD, 'pattern: "b c (nh ph) (nw pw) -> b c (nh ph) (nw pw)"')],
    "nearest resize": [('resize: {size: "${padded}", mode: bilinear}', 'resize: {size: "${padded}", mode: nearest}')],
}


class Pair(TimmPair):
    """Reference and ours at one image size."""

    def __init__(self, size: int, folder):
        self.size = size
        super().__init__(SPEC, "mobilevit_xs", folder, f"mobilevit_xs-{size}.pt", {"img": size},
                         perturb=lambda m: perturb_batch_norms(perturb_everything(m)))


@pytest.fixture(scope="module", params=SIZES, ids=[f"img{size}" for size in SIZES])
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, scratch(request, tmp_path_factory, "weights"))


def test_full_size_parameter_count_and_flops():
    check_full_size(SPEC, "mobilevit_xs", FULL_SIZE, 256)


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref) == FULL_SIZE


def test_outputs_match(pair):
    image = images(2, pair.size)
    with torch.no_grad():
        theirs, ours = pair.ref(image), pair.ours(image)
    assert ours.shape == theirs.shape == (2, 1000)
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_outputs_match_in_training_mode(pair):
    """In training the BatchNorms normalise with the batch's statistics. On copies: a training
    step moves the running statistics."""
    ref, ours = copy.deepcopy(pair.ref).train(), copy.deepcopy(pair.ours).train()
    image = images(4, pair.size, seed=2)
    with torch.no_grad():
        diff = close(ref(image), ours(image))
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    measured = count_flops(lambda: pair.ref(images(1, pair.size)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("variant", list(WRONG))
def test_a_wrong_variant_is_far_off(pair, variant):
    """The checks can fail: the same weights in the spec with the unfold's quadrants in another
    order, with windows of neighbouring pixels in place of the gathered ones, or with the odd
    sides resized by nearest neighbour, move the outputs far past the tolerance."""
    model = pair.edited(*WRONG[variant])
    image = images(1, pair.size)
    with torch.no_grad():
        assert close(pair.ref(image), pair.ours(image)) < TOL
        assert close(pair.ref(image), model(image)) > 100 * TOL


# timm's other MobileViT sizes: the spec with the --set its header gives, loaded from their own
# state dicts by the same mapping file
OTHER_SIZES = {
    "mobilevit_xxs": ({"chs": [16, 24, 48, 64, 80], "br": 2, "tdims": [0, 0, 64, 80, 96], "num_features": 320},
                      1_272_024),
    "mobilevit_s": ({"chs": [32, 64, 96, 128, 160], "tdims": [0, 0, 144, 192, 240], "num_features": 640},
                    5_578_632),
}


@pytest.mark.parametrize("name", list(OTHER_SIZES))
def test_the_other_sizes_load_and_match(name, tmp_path):
    overrides, params = OTHER_SIZES[name]
    overrides = {"img": SIZES[0], **overrides}
    torch.manual_seed(0)
    ref = perturb_batch_norms(perturb_everything(timm.create_model(name, pretrained=False).eval()))
    weights = str(tmp_path / f"{name}.pt")
    torch.save(ref.state_dict(), weights)
    ours = archspec.build(SPEC, overrides, weights=weights).eval()
    assert param_count(ours) == archspec.check(SPEC, overrides).params == param_count(ref) == params
    image = images(1, SIZES[0])
    with torch.no_grad():
        diff = close(ref(image), ours(image))
    assert diff < TOL, diff


# timm checkpoints of the other shipped timm namings (their keys only: built on the meta device),
# MobileViT's sizes, and MobileViT v2 (another network, which no shipped naming loads)
OTHERS = ["vit_tiny_patch16_224", "swin_tiny_patch4_window7_224", "pvt_v2_b0", "levit_128s", "pit_ti_224",
          "deit_small_distilled_patch16_224", "beit_base_patch16_224", "cait_xxs24_224", "crossvit_tiny_240",
          "eva02_tiny_patch14_224", "twins_svt_small", "mobilevitv2_050"]
MOBILEVITS = ["mobilevit_xxs", "mobilevit_xs", "mobilevit_s"]


def test_identify_claims_mobilevit_alone():
    named = shipped_namings()
    ours = named["timm_mobilevit"]
    checkpoints = {name: timm_keys(name) for name in MOBILEVITS}
    claims = {name: sorted(stem for stem, naming in named.items() if naming.applies_to(state))
              for name, state in checkpoints.items()}
    assert all(claimed == ["timm_mobilevit"] for claimed in claims.values()), claims
    wrongly = [name for name in OTHERS if ours.applies_to(timm_keys(name))]
    assert not wrongly, wrongly
