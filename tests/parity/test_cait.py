"""CaiT-XXS24 (specs/cait_xxs24.yaml) against timm's `cait_xxs24_224`: talking-heads self-attention
(the `talking_heads` score part), LayerScale, positions on the patches only, then two blocks of
class attention (the `class` attention kind) and the class token put in front of the patches.

As in tests/parity/test_vocabulary.py: the reference is built with pretrained=False, seeded noise
is put on *every* parameter (timm starts the class token and the positions near zero and the
LayerScales at 1e-5, which would hide a wrong mapping), its state dict is saved to a file and
loaded with `archspec.build(spec, weights=FILE)` alone (the spec names
specs/mappings/timm_cait.yaml). Parameter counts agree (reference = module = checker) at 224 and
at 160 (`img_size=160`, the position table 10x10); logits agree within 1e-5 relative to the
largest logit; FLOPs agree with FlopCounterMode at 224.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, images, param_count, perturb_everything

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "cait_xxs24.yaml")
SIZES = (224, 160)


class Pair:
    """Reference and ours at one image size; ours loaded from the reference's own state dict file."""

    def __init__(self, size: int, folder):
        torch.manual_seed(0)
        self.size = size
        self.ref = perturb_everything(timm.create_model("cait_xxs24_224", pretrained=False, img_size=size).eval())
        path = folder / f"cait_xxs24-{size}.pt"
        torch.save(self.ref.state_dict(), path)
        overrides = None if size == 224 else {"img": size}
        self.report = archspec.check(SPEC, overrides)
        self.ours = archspec.build(SPEC, overrides, weights=str(path)).eval()


@pytest.fixture(scope="module", params=SIZES, ids=lambda s: f"cait_xxs24@{s}")
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)
    if pair.size == 224:
        assert pair.report.params == 11_956_264


def test_logits_match(pair):
    image = images(2, pair.size)
    with torch.no_grad():
        theirs, ours = pair.ref(image), pair.ours(image)
    assert ours.shape == (2, 1000)
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_the_class_blocks_matter(pair):
    """The check can fail: the class-attention blocks' LayerScale changed in ours alone moves the
    logits far past the tolerance (so the class blocks are really computed and compared)."""
    image = images(1, pair.size)
    gamma = pair.ours.get_parameter("blocks_token_only.1.attn.layer_scale.gamma")
    with torch.no_grad():
        before, kept = pair.ours(image), gamma.clone()
        gamma.mul_(3.0)
        after = pair.ours(image)
        gamma.copy_(kept)
    assert close(before, after) > 100 * TOL


def test_flops_match_flop_counter(pair):
    if pair.size != SIZES[0]:
        pytest.skip("FLOPs are compared at the default size")
    ref = pair.ref.requires_grad_(False)  # timm's expanded class token trips FlopCounterMode's module tracker
    measured = count_flops(lambda: ref(images(1, 224)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)
