"""EfficientFormer-L1 (specs/efficientformer_l1.yaml) against timm's `efficientformer_l1`: first
written from the docs alone in a user trial, then shipped with its q, k and v cut from the
[B, heads, N, 2 kd + vd] tensor along axis 3, as timm splits them.

EfficientFormer is a conv network with one attention block at its end: a two-conv BatchNorm
stem, PoolFormer-like MetaBlock2d on the image (avgpool3x3(x) - x as the token mixer, the average
over the cells inside the image only, then an MLP of 1x1 convs and BatchNorms, each with a
LayerScale per channel), strided conv downsampling, and in the last stage the grid flattened to
tokens and a MetaBlock1d whose attention adds a learned bias per head and absolute 2-D offset
(a `param` table [heads, 49], timm's attention_biases, read by `relative_lookup` with `offsets:
absolute`, which rebuilds timm's attention_bias_idxs). Two linear heads, averaged.

timm fixes the attention's grid at 7x7, so it runs only images whose last grid is 7x7 (193 to
224): the reduced size here keeps the 224 image and the last stage (three MetaBlock2d, the Flat,
one MetaBlock1d: the layout the mapping file renames, timm's blocks.4 as the spec's
vit_blocks.0), and has one block in each other stage and 10 classes, the same overrides on the
spec and timm's constructor. As in tests/parity/test_levit.py: the reference built with
pretrained=False, seeded noise on every parameter *and* on the BatchNorms' running statistics
(what eval reads; the variances kept positive), noise of 1 on the attention table, its state
dict saved to a file and loaded with `archspec.build(spec, overrides, weights=FILE)` alone (the
spec names its mapping file). Parameter counts agree (reference = module = checker, and timm's
at the full size), the outputs agree within 1e-5 relative to the largest (eval at 224 and at
200, in training mode), FLOPs agree with FlopCounterMode. The mapping's `identify` claims timm's
EfficientFormer checkpoints and no other shipped naming claims them. The checks can fail: the
table read with signed offsets does not even build, and variants that build from the same
weights are far off.
"""

from __future__ import annotations

import copy

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.weights.test_mapping_identify import shipped_namings, timm_keys
from tests.parity.test_vocabulary import (FLOPS_REL, TOL, TimmPair, check_full_size, close, count_flops, images, param_count,
                                     perturb_batch_norms, perturb_everything, sharpen_tables)

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "efficientformer_l1.yaml")
SIZE = 224  # timm's attention grid is 7x7: 224 / 32 (and any image from 193 up)
OVERRIDES = {"depths": [1, 1, 1, 4], "classes": 10}
TIMM_KWARGS = {"depths": (1, 1, 1, 4), "num_classes": 10}
FULL_SIZE = 12_289_928  # timm's efficientformer_l1

# Variants of the spec that build and load the same weights but compute something else.
WRONG = {
    "relu for gelu in the conv MLPs": ("activation: {fn: gelu}", "activation: {fn: relu}"),
    "the pool counting its padding": ("count_include_pad: false", "count_include_pad: true"),
    "no position bias": ("- {id: weights, softmax: {}}", "- {id: weights, from: scaled, softmax: {}}"),
}

# timm models whose checkpoints (their state dicts' keys) the mappings' `identify` is checked on:
# EfficientFormer's, and those of the other timm namings shipped, EfficientFormerV2's and LeViT's
# (attention_biases and a head_dist too) among them.
OURS = ("efficientformer_l1", "efficientformer_l3")
OTHERS = ("efficientformerv2_s0", "levit_128s", "levit_conv_128s", "deit_small_distilled_patch16_224",
          "vit_tiny_patch16_224", "swin_tiny_patch4_window7_224", "pvt_v2_b0", "cait_xxs24_224",
          "beit_base_patch16_224", "twins_svt_small", "eva02_tiny_patch14_224", "pit_ti_224", "crossvit_tiny_240")


class Pair(TimmPair):
    """TimmPair at the reduced size, with the reference's eval outputs on one batch, which each
    comparison reads."""

    def __init__(self, folder):
        super().__init__(SPEC, "efficientformer_l1", folder, "efficientformer_l1-reduced.pt", OVERRIDES, TIMM_KWARGS,
                         perturb=lambda m: sharpen_tables(perturb_batch_norms(perturb_everything(m)),
                                                          "attention_biases"))
        self.image = images(2, SIZE)
        with torch.no_grad():
            self.expected = self.ref(self.image)


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory) -> Pair:
    return Pair(scratch(request, tmp_path_factory, "weights"))


def test_full_size_parameter_count_and_flops():
    check_full_size(SPEC, "efficientformer_l1", FULL_SIZE, SIZE)


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


def test_outputs_match(pair):
    with torch.no_grad():
        ours = pair.ours(pair.image)
    assert ours.shape == pair.expected.shape == (2, 10)
    diff = close(pair.expected, ours)
    assert diff < TOL, diff


# L3's and L7's layouts of the last stage, at reduced depth: (timm's name, dims, depths, num_vit).
# L3 keeps MetaBlock2d before its Flat (timm's blocks 2 to 5 are vit_blocks 0 to 3); L7 is attention
# only (num_vit = depth: the Flat first, blocks 1 to 3 are vit_blocks 0 to 2).
LARGER = {
    "l3": ("efficientformer_l3", [64, 128, 320, 512], [1, 1, 1, 5], 4),
    "l7": ("efficientformer_l7", [96, 192, 384, 768], [1, 1, 1, 3], 3),
}


@pytest.mark.parametrize("variant", list(LARGER))
def test_l3_and_l7_load_through_the_renames_computed_index(variant, tmp_path):
    """The mapping's rename computes timm's last-stage block index past its Flat from the
    spec's depths and num_vit (g1 - (depths[3] - num_vit) - 1), so L3's and L7's checkpoints
    load into the spec set to their sizes, and compute timm's outputs."""
    name, dims, depths, num_vit = LARGER[variant]
    overrides = {"dims": dims, "depths": depths, "num_vit": num_vit, "classes": 10}
    pair = TimmPair(SPEC, name, tmp_path, f"{name}.pt", overrides, {"depths": tuple(depths), "num_classes": 10},
                    perturb=lambda m: sharpen_tables(perturb_batch_norms(perturb_everything(m)), "attention_biases"))
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)
    image = images(2, SIZE)
    with torch.no_grad():
        diff = close(pair.ref(image), pair.ours(image))
    assert diff < TOL, diff


def test_outputs_match_at_another_size_timm_runs(pair):
    """timm runs any image whose last grid is 7x7 (193 to 224): at 200 the grids are odd (100, 50,
    25, 13, 7), so the strided convs round up and the pools meet borders of every parity. The
    spec's grid follows `img`; built at 200 from the same file."""
    ours = archspec.build(SPEC, {**OVERRIDES, "img": 200}, weights=pair.weights).eval()
    image = images(2, 200, seed=3)
    with torch.no_grad():
        diff = close(pair.ref(image), ours(image))
    assert diff < TOL, diff


def test_outputs_match_in_training_mode(pair):
    """In training the BatchNorms normalise with the batch's statistics; timm still averages the
    two heads (distilled_training is off). On copies: a training step moves the running statistics."""
    ref, ours = copy.deepcopy(pair.ref).train(), copy.deepcopy(pair.ours).train()
    image = images(4, SIZE, seed=2)
    with torch.no_grad():
        diff = close(ref(image), ours(image))
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    measured = count_flops(lambda: pair.ref(images(1, SIZE)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


def test_identify_claims_efficientformer_alone():
    """timm's EfficientFormer checkpoints are claimed by timm_efficientformer.yaml and by no other
    shipped naming (LeViT's identifies by `.attention_biases` and `head_dist.linear.weight`; here
    it is `head_dist.weight`), and it claims none of the other timm checkpoints (EfficientFormerV2's
    stem conv is `stem.conv1.conv`)."""
    named = shipped_namings()
    ours = named["timm_efficientformer"]
    for model in OURS:
        keys = timm_keys(model)
        assert [stem for stem, naming in named.items() if naming.applies_to(keys)] == ["timm_efficientformer"], model
    claimed = [model for model in OTHERS if ours.applies_to(timm_keys(model))]
    assert not claimed, claimed


def test_signed_offsets_do_not_build_with_efficientformers_table():
    """relative_lookup with Swin's signed offsets needs (2H-1)(2W-1) rows, and the table holds
    H W: a located error at the lookup, before anything is built."""
    text = (ROOT / "specs" / "efficientformer_l1.yaml").read_text()
    assert text.count("offsets: absolute") == 1
    with pytest.raises(archspec.SpecError) as caught:
        archspec.build_text(text.replace("offsets: absolute", "offsets: signed"), OVERRIDES)
    first = caught.value.diagnostics[0]
    assert first.path == "stages.3.vit_blocks.0.token_mixer.bias" and first.loc.line is not None
    assert "relative_lookup over a 7x7 grid with signed offsets reads a table of 169 rows" in first.message


@pytest.mark.parametrize("variant", list(WRONG))
def test_a_wrong_variant_is_far_off(pair, variant):
    """The checks can fail: the same weights in the spec with ReLU in place of the conv MLPs'
    GELU, with the 3x3 average counting the zero padding at the border (timm's
    count_include_pad=False), or with the scores' position bias left out (its table still
    loaded), move the outputs far past the tolerance."""
    model = pair.edited(WRONG[variant])
    with torch.no_grad():
        assert close(pair.expected, pair.ours(pair.image)) < TOL
        assert close(pair.expected, model(pair.image)) > 100 * TOL
