"""MAE's ViT-B/16 encoder (specs/mae_b16.yaml) against Hugging Face transformers'
`ViTMAEModel(ViTMAEConfig())`, given the same `noise`: the random masking (argsort of the
noise, the class token put in front after masking) is part of the spec, so all three outputs
are compared: last_hidden_state (within 1e-5), mask and ids_restore (equal).

As in tests/parity/test_vocabulary.py: the reference is built from its config, seeded noise
is put on *every* parameter (HF leaves the frozen position table at zeros at init in this
version, which would hide a wrong mapping of its 197 x 768 entries), its state dict is saved
to a file and loaded with `archspec.build(spec, weights=FILE)` alone (the spec names
specs/mappings/hf_vit_mae.yaml). Parameter counts agree (reference = module = checker) at
224 and at 160, the second against `ViTMAEConfig(image_size=160)` (noise [B, 100]); FLOPs
agree with FlopCounterMode at 224.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, images, param_count, perturb_everything

pytest.importorskip("transformers")

SPEC = str(ROOT / "specs" / "mae_b16.yaml")
SIZES = (224, 160)


def noise_for(batch: int, size: int, seed: int = 2) -> torch.Tensor:
    """MAE's per-patch noise [B, (size / 16)^2], uniform as HF draws it when none is given."""
    return torch.rand(batch, (size // 16) ** 2, generator=torch.Generator().manual_seed(seed))


def reference(size: int):
    from transformers import ViTMAEConfig, ViTMAEModel

    return ViTMAEModel(ViTMAEConfig(image_size=size))


class Pair:
    """Reference and ours at one image size; ours loaded from the reference's own state dict file."""

    def __init__(self, size: int, folder):
        torch.manual_seed(0)
        self.size = size
        self.ref = perturb_everything(reference(size).eval())
        path = folder / f"mae_b16-{size}.pt"
        torch.save(self.ref.state_dict(), path)
        overrides = None if size == 224 else {"img": size}
        self.report = archspec.check(SPEC, overrides)
        self.ours = archspec.build(SPEC, overrides, weights=str(path)).eval()


@pytest.fixture(scope="module", params=SIZES, ids=lambda s: f"mae_b16@{s}")
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count(pair):
    """Including the 197 x 768 position table (frozen in HF, a Parameter all the same)."""
    positions = pair.ref.embeddings.position_embeddings
    assert positions.numel() == (1 + (pair.size // 16) ** 2) * 768 and not positions.requires_grad
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)
    if pair.size == 224:
        assert pair.report.params == 85_798_656


def test_outputs_match(pair):
    image, noise = images(2, pair.size), noise_for(2, pair.size)
    with torch.no_grad():
        out = pair.ref(pixel_values=image, noise=noise)
        hidden, mask, ids_restore = pair.ours(image, noise)
    kept = int((pair.size // 16) ** 2 * (1 - 0.75))
    assert hidden.shape == (2, 1 + kept, 768)
    diff = close(out.last_hidden_state, hidden)
    assert diff < TOL, diff
    assert mask.dtype == out.mask.dtype == torch.float32 and torch.equal(mask, out.mask)
    assert ids_restore.dtype == out.ids_restore.dtype == torch.int64 and torch.equal(ids_restore, out.ids_restore)
    assert int(mask.sum()) == 2 * ((pair.size // 16) ** 2 - kept)


def test_the_noise_decides_what_is_kept(pair):
    """Another noise keeps other patches, in both, and the outputs still agree: the masking is
    computed from the input, not fixed at build time."""
    image = images(2, pair.size)
    first, second = noise_for(2, pair.size, seed=3), noise_for(2, pair.size, seed=4)
    with torch.no_grad():
        a, b = pair.ours(image, first), pair.ours(image, second)
        ref_b = pair.ref(pixel_values=image, noise=second)
    assert not torch.equal(a[1], b[1])
    assert close(ref_b.last_hidden_state, b[0]) < TOL and torch.equal(ref_b.mask, b[1])


def test_flops_match_flop_counter(pair):
    if pair.size != SIZES[0]:
        pytest.skip("FLOPs are compared at the default size")
    measured = count_flops(lambda: pair.ref(pixel_values=images(1, 224), noise=noise_for(1, 224)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


def test_a_pretraining_checkpoint_loads_its_encoder(tmp_path):
    """ViTMAEForPreTraining's state dict (the encoder under `vit.`, and a decoder) loads through
    the same mapping file: the decoder is left out, the encoder's outputs are ViTMAEModel's."""
    from transformers import ViTMAEConfig, ViTMAEForPreTraining

    config = ViTMAEConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                          decoder_hidden_size=32, decoder_num_hidden_layers=1, decoder_intermediate_size=64,
                          image_size=64)
    torch.manual_seed(0)
    full = perturb_everything(ViTMAEForPreTraining(config).eval())
    torch.save(full.state_dict(), tmp_path / "pretraining.pt")
    assert any(k.startswith("decoder.") for k in full.state_dict())
    overrides = {"img": 64, "dim": 64, "depth": 2, "heads": 4}
    ours = archspec.build(SPEC, overrides, weights=str(tmp_path / "pretraining.pt")).eval()
    assert param_count(ours) == param_count(full.vit)
    image, noise = images(2, 64), noise_for(2, 64)
    with torch.no_grad():
        out = full.vit(pixel_values=image, noise=noise)
        hidden, mask, ids_restore = ours(image, noise)
    assert close(out.last_hidden_state, hidden) < TOL
    assert torch.equal(mask, out.mask) and torch.equal(ids_restore, out.ids_restore)


@pytest.mark.parametrize("size", SIZES)
def test_the_small_sibling_mae_ti16_is_exact(size, tmp_path):
    """mae_ti16 (extends mae_b16 at width 192, 3 heads), against ViTMAEModel at that width."""
    from transformers import ViTMAEConfig, ViTMAEModel

    torch.manual_seed(0)
    ref = perturb_everything(ViTMAEModel(ViTMAEConfig(image_size=size, hidden_size=192, num_attention_heads=3,
                                                      intermediate_size=768)).eval())
    torch.save(ref.state_dict(), tmp_path / "mae_ti16.pt")
    spec, overrides = str(ROOT / "specs" / "mae_ti16.yaml"), None if size == 224 else {"img": size}
    ours = archspec.build(spec, overrides, weights=str(tmp_path / "mae_ti16.pt")).eval()
    assert param_count(ours) == archspec.check(spec, overrides).params == param_count(ref)
    image, noise = images(2, size), noise_for(2, size)
    with torch.no_grad():
        out, (hidden, mask, ids_restore) = ref(pixel_values=image, noise=noise), ours(image, noise)
    assert close(out.last_hidden_state, hidden) < TOL
    assert torch.equal(mask, out.mask) and torch.equal(ids_restore, out.ids_restore)
