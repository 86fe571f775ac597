"""VOLO-D1 (specs/volo_d1.yaml) against timm's VOLO (`volo_d1_224`): the conv stem with
BatchNorms, outlook attention (the `outlook` attention kind), the downsampling conv and the
positions added after it, transformer blocks, the class token put in front and two class-attention
blocks (the `class` kind, as CaiT's), and timm's eval output: the class token's logits plus half
the maximum over the patches of the auxiliary head's.

As in tests/parity/test_cait.py: the reference is built with pretrained=False, seeded noise is
put on every parameter and on the BatchNorms' running statistics, its state dict is saved to a
file and loaded with `archspec.build(spec, weights=FILE)` alone (the spec names
specs/mappings/timm_volo.yaml). Every run: a reduced VOLO (one block per stage, narrow, the
same structure: timm's VOLO class with those sizes and the spec `--set` to them) at 64 and at 96
pixels (an odd 6x6 grid after the downsampling; the outlookers' 8x8 and 12x12 grids); the full
model's parameter count. Slow tier: volo_d1_224 itself at 224 and at 256 (`img_size=256`, the
position table 16x16), and the FLOPs against FlopCounterMode.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import (FLOPS_REL, TOL, close, count_flops, images, param_count,
                                          perturb_batch_norms, perturb_everything)

volo = pytest.importorskip("timm.models.volo")

SPEC = str(ROOT / "specs" / "volo_d1.yaml")
PARAMS = 26_632_040  # timm volo_d1_224

# the reduced VOLO: timm's keywords and the spec's params for the same sizes
SMALL_TIMM = dict(layers=(1, 1, 1, 1), embed_dims=(32, 64, 64, 64), num_heads=(2, 4, 4, 4), stem_hidden_dim=16,
                  num_classes=10)
SMALL_SPEC = dict(layers=[1, 1, 1, 1], dims=[32, 64, 64, 64], heads=[2, 4, 4, 4], stem_hidden=16, classes=10)


class Pair:
    """Reference and ours at one image size; ours loaded from the reference's own state dict file."""

    def __init__(self, size: int, full: bool, folder):
        torch.manual_seed(0)
        self.size = size
        if full:
            ref = volo.volo_d1_224(pretrained=False, img_size=size)
            self.overrides = None if size == 224 else {"img": size}
        else:
            ref = volo.VOLO(img_size=size, **SMALL_TIMM)
            self.overrides = {**SMALL_SPEC, "img": size}
        self.ref = perturb_batch_norms(perturb_everything(ref.eval())).requires_grad_(False)
        self.weights = folder / f"volo-{'d1' if full else 'small'}-{size}.pt"
        torch.save(self.ref.state_dict(), self.weights)
        self.report = archspec.check(SPEC, self.overrides)
        self.ours = archspec.build(SPEC, self.overrides, weights=str(self.weights)).eval()

    def edited(self, right: str, wrong: str):
        """The spec with one edit, from these weights."""
        text = open(SPEC).read()
        assert text.count(right) == 1, right
        return archspec.build_text(text.replace(right, wrong), self.overrides, weights=str(self.weights)).eval()


CASES = [pytest.param((64, False), id="small@64"), pytest.param((96, False), id="small@96"),
         pytest.param((224, True), id="volo_d1@224", marks=pytest.mark.slow),
         pytest.param((256, True), id="volo_d1@256", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=CASES)
def pair(request, tmp_path_factory) -> Pair:
    size, full = request.param
    return Pair(size, full, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)
    trainable = sum(p.numel() for p in pair.ours.parameters() if p.requires_grad)
    assert trainable == pair.report.params


def test_full_size_parameter_count():
    """volo_d1_224's 26,632,040 parameters, all trainable in both, without building ours (timm's
    model on the meta device: counted, never initialised)."""
    ref = volo.volo_d1_224(pretrained=False, device="meta")
    assert archspec.check(SPEC).params == param_count(ref) == PARAMS
    assert sum(p.numel() for p in ref.parameters() if p.requires_grad) == PARAMS


def test_logits_match(pair):
    image = images(2, pair.size)
    with torch.no_grad():
        theirs, ours = pair.ref(image), pair.ours(image)
    assert ours.shape == theirs.shape == (2, pair.ref.num_classes)
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_a_wrong_spec_is_seen(pair):
    """The check can fail: the outlookers' stride 1 for 2, or the auxiliary head's half left out,
    each moves the logits far past the tolerance."""
    if pair.size != 64:
        pytest.skip("once, on the small model")
    image = images(1, pair.size)
    with torch.no_grad():
        for right, wrong in (("outlook_stride: 2", "outlook_stride: 1"), ("factor: 0.5", "factor: 1.0")):
            assert close(pair.ref(image), pair.edited(right, wrong)(image)) > 100 * TOL, wrong


@pytest.mark.slow
def test_flops_match_flop_counter(pair):
    if pair.size != 224:
        pytest.skip("FLOPs are compared at the default size")
    measured = count_flops(lambda: pair.ref(images(1, 224)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)
