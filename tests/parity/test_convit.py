"""ConViT-Ti (specs/convit_tiny.yaml) against timm's `convit_tiny`.

ConViT's gated positional self-attention (GPSA) needs what no attention `kind` says: a second,
positional attention, softmax of a linear map of each (query, key) pair's offset (dx, dy,
dx^2 + dy^2) on the patch grid, mixed with the content attention by a learned gate per head.
The spec writes it from tensor ops: the offsets are generated constants (`constant` with
`fill: index` along the key's and the query's grid axes, subtracted), joined by `concat` along
the last axis and mapped by a `linear` over that axis, as timm's `rel_indices` buffer and its
`pos_proj`. The class token is inserted by the first plain-attention block, and the mapping
names it with an expression of the spec's `local` (`blocks.${local}.cls.tokens`).

At a reduced size (a 64x64 image: a 4x4 grid; three blocks, the first two GPSA) and at full
size for the parameter count and FLOPs: the reference built with pretrained=False, seeded noise
on every parameter, its state dict saved and loaded with `archspec.build(spec, overrides,
weights=FILE)` alone. The checks can fail: variants that build from the same weights (the
offsets' dx and dy swapped, the gate on the wrong attention) are far off.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, TimmPair, check_full_size, close, count_flops, images, param_count

timm = pytest.importorskip("timm")

SPEC = str(ROOT / "specs" / "convit_tiny.yaml")
SIZE = 64  # a 4x4 grid
OVERRIDES = {"img": SIZE, "depth": 3, "local": 2}
TIMM_KWARGS = {"img_size": SIZE, "depth": 3, "local_up_to_layer": 2}
FULL_SIZE = 5_710_512  # timm's convit_tiny

# Variants of the spec that build and load the same weights but compute something else.
WRONG = {
    "dx and dy swapped": ("from: [dx, dy, distance2]", "from: [dy, dx, distance2]"),
    "the gate on the content attention": (
        ("from: [content_gate, patch_score]", "from: [gate, patch_score]"),
        ("from: [gate, pos_score]", "from: [content_gate, pos_score]")),
}


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory) -> TimmPair:
    return TimmPair(SPEC, "convit_tiny", scratch(request, tmp_path_factory, "weights"), "convit_tiny-64.pt",
                    OVERRIDES, TIMM_KWARGS)


def test_full_size_parameter_count_and_flops():
    check_full_size(SPEC, "convit_tiny", FULL_SIZE, 224)


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


def test_outputs_match(pair):
    theirs, ours = pair.outputs(SIZE)
    assert ours.shape == theirs.shape == (2, 1000)
    diff = close(theirs, ours)
    assert diff < TOL, diff


def test_the_generated_offsets_are_timms_rel_indices(pair):
    """The `offsets` block's constant [1, N, N, 3] equals the buffer timm computes at its first call."""
    with torch.no_grad():
        pair.ref(images(1, SIZE))
    theirs = pair.ref.blocks[0].attn.rel_indices  # [1, 16, 16, 3]
    captured = {}
    handle = pair.ours.get_submodule("blocks.0.attn.rel_indices").register_forward_hook(
        lambda module, args, out: captured.setdefault("out", out))
    with torch.no_grad():
        pair.ours(images(1, SIZE))
    handle.remove()
    assert captured["out"].shape == theirs.shape == (1, 16, 16, 3)
    assert torch.equal(captured["out"], theirs)


def test_flops_match_flop_counter(pair):
    measured = count_flops(lambda: pair.ref(images(1, SIZE)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("variant", list(WRONG))
def test_a_wrong_variant_is_far_off(pair, variant):
    edits = WRONG[variant]
    right, wrong = pair.wrong_gaps(edits if isinstance(edits[0], tuple) else (edits,), SIZE)
    assert right < TOL and wrong > 100 * TOL
