"""MViTv2 (specs/mvitv2_t.yaml) against timm's `mvitv2_tiny` (MultiScaleVit), which we did not
write: pooling attention in every block (q, k, v pooled by strided depthwise convs + LayerNorms,
residual pooling, decomposed relative positions between the query grid and the pooled key grid),
the width and grid changing in the first block of stages 2-4 (the shortcut projected and
max-pooled), the final norm and the mean-pooled head.

As in tests/parity/test_sam.py: the reference is built with pretrained=False at the size compared
(mvitv2 builds its rel-pos tables for its img_size), seeded noise is put on *every* parameter (the
rel_pos tables start near zero, LayerNorms at 1 and 0), its state dict is saved to a file and
loaded with `archspec.build(spec, weights=FILE)` alone (the spec names
specs/mappings/timm_mvitv2.yaml). Trainable and total parameter counts agree (reference = module =
checker) and the logits agree within 1e-5 (relative to outputs larger than 1).

Every run: the small sibling mvitv2_xt (the same network at widths 32-256, one block a stage)
against MultiScaleVit at that config, at 64 and at 96 (grids 24, 12, 6, 3), with FLOPs against
FlopCounterMode, a mapping that swaps a block's tables is seen, and the 64 checkpoint loads at
96 with its tables resampled as timm's checkpoint_filter_fn resamples them. The slow tier:
mvitv2_t itself (24,173,320 parameters at 224) at 224 and at 256.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, images, param_count, perturb_everything

mvitv2 = pytest.importorskip("timm.models.mvitv2")

SPEC = str(ROOT / "specs" / "mvitv2_t.yaml")
SMALL = str(ROOT / "specs" / "mvitv2_xt.yaml")
COUNTS = {224: 24_173_320, 256: 24_185_224}  # timm's mvitv2_tiny at each img_size (its rel-pos tables grow)


def tiny(size: int):
    """timm's mvitv2_tiny at `size`."""
    import timm

    return timm.create_model("mvitv2_tiny", pretrained=False, img_size=size)


def small(size: int):
    """MultiScaleVit at mvitv2_xt's config."""
    cfg = mvitv2.MultiScaleVitCfg(depths=(1, 1, 1, 1), embed_dim=32, num_heads=1)
    return mvitv2.MultiScaleVit(cfg, img_size=size, num_classes=10)


def counts(model) -> tuple[int, int]:
    """(trainable, total) parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad), param_count(model)


class Pair:
    """Reference and ours at one image size; ours loaded from the reference's own state dict file."""

    def __init__(self, spec: str, ref, size: int, folder, overrides: dict | None = None):
        torch.manual_seed(0)
        self.size = size
        self.ref = perturb_everything(ref.eval())
        self.path = folder / f"mvitv2-{size}.pt"
        torch.save(self.ref.state_dict(), self.path)
        self.spec, self.overrides = spec, overrides
        self.report = archspec.check(spec, overrides)
        self.ours = archspec.build(spec, overrides, weights=str(self.path)).eval()

    def check_counts(self) -> None:
        assert counts(self.ours) == counts(self.ref) == (self.report.params, self.report.params)

    def difference(self, ours=None, batch: int = 2) -> float:
        image = images(batch, self.size)
        with torch.no_grad():
            return close(self.ref(image), (ours or self.ours)(image))


@pytest.fixture(scope="module")
def pair_64(request, tmp_path_factory) -> Pair:
    return Pair(SMALL, small(64), 64, scratch(request, tmp_path_factory, "weights"))


def test_the_small_sibling_is_exact_at_64(pair_64):
    """Grids 16, 8, 4, 2; the first stage's keys on 4x4; FLOPs as FlopCounterMode counts timm's."""
    pair_64.check_counts()
    diff = pair_64.difference()
    assert diff < TOL, diff
    measured = count_flops(lambda: pair_64.ref(images(1, 64)))
    assert pair_64.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair_64.report.flops, measured)


def test_the_small_sibling_is_exact_at_96(tmp_path):
    """Grids 24, 12, 6, 3 (the reference built at 96, its tables for those grids)."""
    pair = Pair(SMALL, small(96), 96, tmp_path, {"img": 96})
    pair.check_counts()
    diff = pair.difference()
    assert diff < TOL, diff


def test_a_mapping_that_swaps_the_relative_tables_is_seen(pair_64, tmp_path):
    """The comparison can fail: the rows' and columns' tables of one block swapped (the same shape)."""
    state = {k: v.clone() for k, v in pair_64.ref.state_dict().items()}
    key = "stages.1.blocks.0.attn.rel_pos_"
    state[key + "h"], state[key + "w"] = state[key + "w"], state[key + "h"]
    torch.save(state, tmp_path / "swapped.pt")
    swapped = archspec.build(SMALL, weights=str(tmp_path / "swapped.pt")).eval()
    assert pair_64.difference(swapped) > 100 * TOL


def test_a_checkpoint_of_another_size_loads_as_timms_filter_resamples_it(pair_64, tmp_path):
    """mvitv2_xt at 96 loads the 64 checkpoint, its relative tables resampled on loading (the
    pooled kind's RESAMPLE fact), and equals timm's model at 96 given the same checkpoint through
    its checkpoint_filter_fn (linear interpolation of every rel_pos table)."""
    ref = small(96).eval()
    ref.load_state_dict(mvitv2.checkpoint_filter_fn(dict(pair_64.ref.state_dict()), ref))
    ours = archspec.build(SMALL, {"img": 96}, weights=str(pair_64.path)).eval()
    table = "stages.0.blocks.0.attn.decomposed.rel_pos_h"
    assert ours.get_parameter(table).shape[0] == 47 != pair_64.ours.get_parameter(table).shape[0]  # 2 * 24 - 1, 31
    image = images(2, 96)
    with torch.no_grad():
        diff = close(ref(image), ours(image))
    assert diff < TOL, diff


@pytest.mark.slow
@pytest.mark.parametrize("size", [224, 256])
def test_mvitv2_tiny_is_exact(size, tmp_path):
    """224: grids 56, 28, 14, 7 (keys on 14x14, 14x14, 14x14, 7x7); 256: grids 64, 32, 16, 8."""
    pair = Pair(SPEC, tiny(size), size, tmp_path, None if size == 224 else {"img": size})
    pair.check_counts()
    assert pair.report.params == COUNTS[size]
    diff = pair.difference(batch=1)
    assert diff < TOL, diff
