"""XCiT-Nano-12/16 (specs/xcit_nano_12_p16.yaml) against timm's `xcit_nano_12_p16_224`: first
written from the docs alone in a user trial (exact but for F.normalize's eps and with cos written
as a shifted sin), then shipped with `clamp` and `cos`.

XCiT needed three things no primitive had a word for, written from tensor ops: Fourier-feature
positions generated from the grid (`constant` with `fill: index`, `exp`, `sin`, `cos`, the
pairs interleaved by `concat` along a new last axis and a `rearrange`), cross-covariance
attention (20 nodes a block: q and k L2-normalised over the tokens as F.normalize does, a
learned temperature per head, attention between channels; `attention: {kind: xca}` now, one
fused kernel over the heads transposed), and the class
attention block whose patches take the normed input times gamma1 too (`kind: class` without its
norm and residual, and the rest as nodes).

At a reduced size (a 160x160 image: a 10x10 grid, and 225: 15x15, two XCA blocks; timm
generates its positions for any size) and at full size for the parameter count and FLOPs: the reference built with
pretrained=False, seeded noise on every parameter and BatchNorm statistic, its state dict saved
and loaded with `archspec.build(spec, overrides, weights=FILE)` alone. The checks can fail:
variants that build from the same weights (sin and cos swapped, the rows' and columns' features
swapped) are far off.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import (FLOPS_REL, TOL, TimmPair, check_full_size, close, count_flops, images, param_count,
                                     perturb_batch_norms, perturb_everything)

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "xcit_nano_12_p16.yaml")
SIZE = 160  # a 10x10 grid
OVERRIDES = {"img": SIZE, "depth": 2}
TIMM_KWARGS = {"depth": 2}
FULL_SIZE = 3_053_224  # timm's xcit_nano_12_p16_224

# Variants of the spec that build and load the same weights but compute something else.
WRONG = {
    "sin and cos swapped": ("from: [sin_pairs, cos_pairs]", "from: [cos_pairs, sin_pairs]"),
    "rows and columns swapped": ("from: [y, x], concat", "from: [x, y], concat"),
}


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory) -> TimmPair:
    return TimmPair(SPEC, "xcit_nano_12_p16_224", scratch(request, tmp_path_factory, "weights"), "xcit-160.pt",
                    OVERRIDES, TIMM_KWARGS, perturb=lambda m: perturb_batch_norms(perturb_everything(m)))


def test_full_size_parameter_count_and_flops():
    check_full_size(SPEC, "xcit_nano_12_p16_224", FULL_SIZE, 224)


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


@pytest.mark.parametrize("size", [SIZE, 225])
def test_outputs_match(pair, size):
    """At 225 the four stride-2 convs round the grid up to 15x15, and the positions follow it."""
    theirs, ours = pair.outputs(size)
    assert ours.shape == theirs.shape == (2, 1000)
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    measured = count_flops(lambda: pair.ref(images(1, SIZE)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("variant", list(WRONG))
def test_a_wrong_variant_is_far_off(pair, variant):
    right, wrong = pair.wrong_gaps((WRONG[variant],), SIZE)
    assert right < TOL and wrong > 100 * TOL
