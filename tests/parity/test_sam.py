"""SAM's ViT-B/16 image encoder (specs/sam_vit_b.yaml) against timm's `samvit_base_patch16`:
windows of 14 over a grid they do not divide (64 at 1024, 16 at 256: padded with zero tokens
after the norm, attended to, cropped after), four global blocks, decomposed relative positions
in every block, the conv neck, and timm's default head (num_classes 0: the neck's map averaged).

As in tests/parity/test_mae.py: the reference is built with pretrained=False, seeded noise is put
on *every* parameter (SAM's rel_pos tables and absolute positions start at zero, which would hide
a wrong mapping of them), its state dict is saved to a file and loaded with
`archspec.build(spec, weights=FILE)` alone (the spec names specs/mappings/timm_sam.yaml).
Parameter counts agree (reference = module = checker), the outputs `pooled` [B, 256] (timm's
forward) and `image_embeddings` [B, 256, H, W] (timm's forward_features: the neck's map) agree
within 1e-5 (relative to outputs larger than 1). 256 runs in every tier, 1024 (4096
tokens, ~1 TFLOP per image) in the slow tier; the small sibling sam_vit_ti against the same
timm class at its size.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, run_capturing, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, images, param_count, perturb_everything

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "sam_vit_b.yaml")
SMALL = str(ROOT / "specs" / "sam_vit_ti.yaml")
COUNTS = {1024: 89_670_912, 256: 86_672_640}  # timm's samvit_base_patch16 at each img_size


def reference(size: int, **kwargs):
    return timm.create_model("samvit_base_patch16", pretrained=False, img_size=size, **kwargs)


class Pair:
    """Reference and ours at one image size; ours loaded from the reference's own state dict file."""

    def __init__(self, spec: str, ref, overrides: dict | None, folder, name: str):
        torch.manual_seed(0)
        self.size = ref.patch_embed.img_size[0]
        self.ref = perturb_everything(ref.eval())
        path = folder / f"{name}-{self.size}.pt"
        torch.save(self.ref.state_dict(), path)
        self.report = archspec.check(spec, overrides)
        self.ours = archspec.build(spec, overrides, weights=str(path)).eval()

    def compare(self, batch: int = 2) -> None:
        """Both outputs, the pooled vector and the neck's map, within TOL; the map is the neck's last node's."""
        image = images(batch, self.size)
        with torch.no_grad():
            features = self.ref.forward_features(image)  # [B, 256, H, W]
            want = self.ref.forward_head(features)  # [B, 256]
        (got, embeddings), seen = run_capturing(self.ours, (image,), ["neck.norm2"])
        assert want.shape == got.shape == (batch, features.shape[1])
        diff = close(want, got)
        assert diff < TOL, diff
        assert embeddings.shape == features.shape  # the output image_embeddings [B, 256, H, W]
        diff = close(features, embeddings)
        assert diff < TOL, diff
        neck = seen["neck.norm2"]  # [B, H*W, 256], the grid row-major
        assert torch.equal(neck, embeddings.flatten(2).transpose(1, 2))


def sam_pair(size: int, folder) -> Pair:
    return Pair(SPEC, reference(size), None if size == 1024 else {"img": size}, folder, "sam_vit_b")


@pytest.fixture(scope="module")
def pair_256(request, tmp_path_factory) -> Pair:
    return sam_pair(256, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count_at_256(pair_256):
    assert param_count(pair_256.ours) == pair_256.report.params == param_count(pair_256.ref) == COUNTS[256]


def test_outputs_match_at_256(pair_256):
    """16x16 grid, windows of 14: each window block pads to 28x28 (4 windows, 528 padding tokens)."""
    assert pair_256.ref.pos_embed.shape == (1, 16, 16, 768)
    pair_256.compare()


def test_flops_match_flop_counter_at_256(pair_256):
    """The padding tokens' projections and attention are counted, as FlopCounterMode counts them."""
    measured = count_flops(lambda: pair_256.ref(images(1, 256)))  # to_image is a view: no FLOPs
    assert pair_256.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair_256.report.flops, measured)


def test_a_mapping_that_loses_the_relative_positions_is_seen(pair_256, tmp_path):
    """The comparison can fail: the reference's rel_pos tables of block 0 swapped (h <-> w, the
    same shape) give other outputs."""
    state = {k: v.clone() for k, v in pair_256.ref.state_dict().items()}
    state["blocks.0.attn.rel_pos_h"], state["blocks.0.attn.rel_pos_w"] = (state["blocks.0.attn.rel_pos_w"],
                                                                          state["blocks.0.attn.rel_pos_h"])
    torch.save(state, tmp_path / "swapped.pt")
    ours = archspec.build(SPEC, {"img": 256}, weights=str(tmp_path / "swapped.pt")).eval()
    image = images(1, 256)
    with torch.no_grad():
        assert close(pair_256.ref(image), ours(image)[0]) > 100 * TOL


@pytest.mark.slow
def test_parameters_and_outputs_match_at_1024(tmp_path):
    """The default size: 64x64 grid, windows pad to 70x70 (25 windows); FLOPs as at 256."""
    pair = sam_pair(1024, tmp_path)
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref) == COUNTS[1024]
    pair.compare(batch=1)
    measured = count_flops(lambda: pair.ref(images(1, 1024)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


def test_the_small_sibling_sam_vit_ti_is_exact(tmp_path):
    """sam_vit_ti: the same architecture at width 192, 3 heads, 4 blocks (global 1 and 3), image 128,
    windows of 3 over the 8x8 grid (padded to 9x9), against VisionTransformerSAM at that config."""
    ref = timm.create_model("samvit_base_patch16", pretrained=False, img_size=128, embed_dim=192, num_heads=3,
                            depth=4, global_attn_indexes=[1, 3], window_size=3, neck_chans=64)
    pair = Pair(SMALL, ref, None, tmp_path, "sam_vit_ti")
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)
    pair.compare()
