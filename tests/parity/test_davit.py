"""DaViT-Tiny (specs/davit_tiny.yaml) against timm's `davit_tiny`: first written from the docs
alone in a user trial (exact at 224, 0.72 off at 200 where a stage's grid is odd), then shipped
once `pad` could say timm's Downsample, which pads an odd grid at the bottom and right before
its 2x2 stride-2 conv.

DaViT's channel group attention was written from tensor ops at first (15 nodes a block: per
head, softmax((k s)^T v) over the head's channels, applied to q); it is `attention: {kind:
channel}` now, one fused kernel over the heads transposed. Its spatial blocks are window
attention without a position bias, the grid padded to a multiple of the window (`pad: true`).

At reduced sizes (one block pair per stage; 100x100: grids 25 -> 13 -> 7 -> 4, every one odd
but the last; 128x128: 32 -> 16 -> 8 -> 4) and at full size for the parameter count and FLOPs:
the reference built with pretrained=False, seeded noise on every parameter, its state dict saved
and loaded with `archspec.build(spec, overrides, weights=FILE)` alone. The checks can fail:
variants that build from the same weights (no padding before the downsampling conv, global
attention between the tokens in place of the channel attention) are far off.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, TimmPair, check_full_size, close, count_flops, images, param_count

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "davit_tiny.yaml")
SIZE = 100  # grids 25 -> 13 -> 7 -> 4: the downsampling pads three odd grids
OVERRIDES = {"img": SIZE, "depths": [1, 1, 1, 1]}
TIMM_KWARGS = {"depths": (1, 1, 1, 1)}
FULL_SIZE = 28_360_168  # timm's davit_tiny

# Variants of the spec that build and load the same weights but compute something else.
WRONG = {
    "no padding before the downsampling": ("pad: {to_multiple: 2}", "pad: {sides: [0, 0, 0, 0]}"),
    "global attention in place of the channel attention": ("attention: {kind: channel", "attention: {kind: global"),
}


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory) -> TimmPair:
    return TimmPair(SPEC, "davit_tiny", scratch(request, tmp_path_factory, "weights"), "davit_tiny-small.pt",
                    OVERRIDES, TIMM_KWARGS)


def test_full_size_parameter_count_and_flops():
    check_full_size(SPEC, "davit_tiny", FULL_SIZE, 224)


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


@pytest.mark.parametrize("size", [SIZE, 128])
def test_outputs_match(pair, size):
    """timm's DaViT runs any size; the spec is built at each (the same weights fit every size)."""
    theirs, mine = pair.outputs(size)
    assert mine.shape == theirs.shape == (2, 1000)
    diff = close(theirs, mine)
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    measured = count_flops(lambda: pair.ref(images(1, SIZE)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("variant", list(WRONG))
def test_a_wrong_variant_is_far_off(pair, variant):
    right, wrong = pair.wrong_gaps((WRONG[variant],), SIZE)
    assert right < TOL and wrong > 100 * TOL
