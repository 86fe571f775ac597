"""BEiT-B/16 (specs/beit_b16.yaml) against timm's `beit_base_patch16_224`, which we did not
write: relative position tables per block (the `relative_table` score part, with BEiT's three
class-token rows), q/v biases, LayerScale, no absolute positions, fc_norm over the mean of the
patch tokens.

As in tests/parity/test_vocabulary.py: the reference is built with pretrained=False, seeded
noise is put on *every* parameter (timm zeroes the tables and the q/v biases and sets LayerScale
to 0.1, which would hide a wrong mapping), its state dict is saved to a file and loaded with
`archspec.build(spec, weights=FILE)` alone (the spec names specs/mappings/timm_beit.yaml).
Parameter counts agree (reference = module = checker) at 224 and at 160, the second against
`img_size=160` (timm sizes its tables to the 10x10 grid); the logits agree within 1e-5
(relative to outputs larger than 1); FLOPs agree with FlopCounterMode at 224. The small sibling
beit_ti16 is checked the same way against timm's model at its width, at both sizes. BEiT-B at
160 runs in the slow tier (the default tier has it at 224 and the architecture at 160 through
the sibling).
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, images, param_count, perturb_everything

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "beit_b16.yaml")
SIBLING = str(ROOT / "specs" / "beit_ti16.yaml")
SIZES = (224, 160)


def reference(size: int, **kwargs):
    return timm.create_model("beit_base_patch16_224", pretrained=False, img_size=size, **kwargs)


def overrides(size: int):
    return None if size == 224 else {"img": size}


class Pair:
    """Reference and ours at one image size; ours loaded from the reference's own state dict file."""

    def __init__(self, spec: str, size: int, folder, **kwargs):
        torch.manual_seed(0)
        self.size = size
        self.ref = perturb_everything(reference(size, **kwargs).eval())
        path = folder / f"beit-{size}.pt"
        torch.save(self.ref.state_dict(), path)
        self.report = archspec.check(spec, overrides(size))
        self.ours = archspec.build(spec, overrides(size), weights=str(path)).eval()


@pytest.fixture(scope="module", params=[SIZES[0], pytest.param(SIZES[1], marks=pytest.mark.slow)],
                ids=lambda s: f"beit_b16@{s}")
def pair(request, tmp_path_factory) -> Pair:
    return Pair(SPEC, request.param, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count(pair):
    """Including twelve tables of (2*14-1)^2 + 3 = 732 rows x 12 heads at 224 ((2*10-1)^2 + 3 at 160)."""
    side = pair.size // 16
    table = pair.ref.blocks[0].attn.relative_position_bias_table
    assert table.shape == ((2 * side - 1) ** 2 + 3, 12)
    assert pair.ours.blocks[0].attn.relative_table.relative_position_bias_table.shape == table.shape
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


def test_logits_match(pair):
    x = images(2, pair.size)
    with torch.no_grad():
        expected, got = pair.ref(x), pair.ours(x)
    assert got.shape == (2, 1000)
    diff = close(expected, got)
    assert diff < TOL, diff


def test_flops_match_flop_counter(pair):
    if pair.size != SIZES[0]:
        pytest.skip("FLOPs are compared at the default size")
    measured = count_flops(lambda: pair.ref(images(1, 224)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("size", SIZES)
def test_the_small_sibling_beit_ti16_is_exact(size, tmp_path):
    """beit_ti16 (extends beit_b16 at width 192, 3 heads) against timm's model at that width."""
    small = Pair(SIBLING, size, tmp_path, embed_dim=192, num_heads=3)
    assert param_count(small.ours) == small.report.params == param_count(small.ref)
    x = images(2, size)
    with torch.no_grad():
        diff = close(small.ref(x), small.ours(x))
    assert diff < TOL, diff


def test_a_checkpoint_that_saved_the_index_loads(tmp_path):
    """Checkpoints of the original BEiT code carry `relative_position_index` (a buffer timm no
    longer saves); the mapping drops it, as timm's checkpoint filter does, and says nothing is
    learned among what it dropped."""
    torch.manual_seed(0)
    ref = perturb_everything(reference(64, embed_dim=192, num_heads=3, depth=2).eval())
    state = dict(ref.state_dict())
    for i, block in enumerate(ref.blocks):
        state[f"blocks.{i}.attn.relative_position_index"] = block.attn.relative_position_index
    torch.save(state, tmp_path / "with_index.pt")
    ours = archspec.build(SIBLING, {"img": 64, "depth": 2}, weights=str(tmp_path / "with_index.pt")).eval()
    x = images(2, 64)
    with torch.no_grad():
        assert close(ref(x), ours(x)) < TOL
