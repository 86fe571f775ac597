"""LeViT-128S (specs/levit_128s.yaml) against timm's `levit_128s` (LevitDistilled, use_conv=False):
first written from the docs alone in a user trial, then shipped once `relative_lookup` could read
LeViT's attention biases.

LeViT is a network of linears and BatchNorms: every linear and conv is followed by a BatchNorm
(timm's LinearNorm and ConvNorm, a two-node block here), no LayerNorm anywhere, hardswish as the
activation. Its attention adds to the scores a learned bias per head and absolute 2-D offset,
|dy| W + |dx|: a `param` table [heads, H W] (timm's attention_biases) read by `relative_lookup`
with `offsets: absolute`, which rebuilds timm's attention_bias_idxs (a buffer timm does not
save); the downsampling attention takes its queries from every second row and column
(`stride: 2` on both the query pooling and the lookup). Two heads, averaged in eval.

As in tests/parity/test_pit_crossvit.py, at a reduced size (one block per stage, a 112x112 image:
7x7 -> 4x4 -> 2x2 grids, the same overrides on the spec and timm's constructor): the reference
built with pretrained=False, seeded noise on every parameter *and* on the BatchNorms' running
statistics (what eval reads; the variances kept positive), its state dict saved to a file and
loaded with `archspec.build(spec, overrides, weights=FILE)` alone (the spec names its mapping
file). Parameter counts agree (reference = module = checker, and timm's at the full size), the
outputs agree within 1e-5 relative to the largest (eval, and in training mode, where the
BatchNorms use the batch's statistics), FLOPs agree with FlopCounterMode. The checks can fail:
the tables read with signed offsets do not even build, and variants that build from the same
weights are far off.
"""

from __future__ import annotations

import copy

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import (FLOPS_REL, TOL, TimmPair, check_full_size, close, count_flops, images, param_count,
                                     perturb_batch_norms, perturb_everything, sharpen_tables)

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "levit_128s.yaml")
SIZE = 112  # grids 7x7 -> 4x4 -> 2x2: odd, so the downsampling rounds up
OVERRIDES = {"img": SIZE, "depths": [1, 1, 1]}
TIMM_KWARGS = {"img_size": SIZE, "depth": (1, 1, 1)}
FULL_SIZE = 7_777_058  # timm's levit_128s

# Variants of the spec that build and load the same weights but compute something else: (right,
# wrong, how many times right occurs: every hardswish, the scores of both attention blocks).
WRONG = {
    "gelu for hardswish": ("activation: {fn: hardswish}", "activation: {fn: gelu}", 6),
    "no position bias": ("- {id: weights, softmax: {}}", "- {id: weights, from: scaled, softmax: {}}", 2),
}


def perturb_levit(model):
    """Noise on every parameter and BatchNorm statistic, and on the zero-initialised tables."""
    return sharpen_tables(perturb_batch_norms(perturb_everything(model)), "attention_biases")


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory) -> TimmPair:
    return TimmPair(SPEC, "levit_128s", scratch(request, tmp_path_factory, "weights"), "levit_128s-112.pt",
                    OVERRIDES, TIMM_KWARGS, perturb=perturb_levit)


def test_full_size_parameter_count_and_flops():
    check_full_size(SPEC, "levit_128s", FULL_SIZE, 224)


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


def test_outputs_match(pair):
    image = images(2, SIZE)
    with torch.no_grad():
        theirs, ours = pair.ref(image), pair.ours(image)
    assert ours.shape == theirs.shape == (2, 1000)
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_outputs_match_in_training_mode(pair):
    """In training the BatchNorms normalise with the batch's statistics, over the batch and the
    tokens (timm's LinearNorm flattens both); timm still averages the two heads
    (distilled_training is off). On copies: a training step moves the running statistics."""
    ref, ours = copy.deepcopy(pair.ref).train(), copy.deepcopy(pair.ours).train()
    image = images(4, SIZE, seed=2)
    with torch.no_grad():
        diff = close(ref(image), ours(image))
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    measured = count_flops(lambda: pair.ref(images(1, SIZE)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


def test_signed_offsets_do_not_build_with_levits_tables():
    """relative_lookup with Swin's signed offsets needs (2H-1)(2W-1) rows, and LeViT's tables
    hold H W: a located error at each lookup, before anything is built."""
    text = (ROOT / "specs" / "levit_128s.yaml").read_text()
    assert "offsets: absolute" in text
    with pytest.raises(archspec.SpecError) as caught:
        archspec.build_text(text.replace("offsets: absolute", "offsets: signed"), OVERRIDES)
    first = caught.value.diagnostics[0]
    assert first.path == "stages.0.blocks.0.attn.bias" and first.loc.line is not None
    assert "relative_lookup over a 7x7 grid with signed offsets reads a table of 169 rows" in first.message


@pytest.mark.parametrize("variant", list(WRONG))
def test_a_wrong_variant_is_far_off(pair, variant):
    """The checks can fail: the same weights in the spec with gelu in place of hardswish, or with
    the scores' position bias left out (its table still loaded), move the outputs far past the
    tolerance."""
    model = pair.edited(WRONG[variant])
    image = images(1, SIZE)
    with torch.no_grad():
        assert close(pair.ref(image), pair.ours(image)) < TOL
        assert close(pair.ref(image), model(image)) > 100 * TOL
