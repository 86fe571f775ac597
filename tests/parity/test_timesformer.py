"""TimeSformer (specs/timesformer.yaml) against Hugging Face transformers'
`TimesformerModel(TimesformerConfig(...))`: divided space-time attention over frames and patch
positions folded into the batch, with no attention written by hand.

As in tests/parity/test_mae.py: the reference is built from its config, seeded noise is put on
*every* parameter (HF starts the class token, the position and time tables at zeros), its state
dict is saved to a file and loaded with `archspec.build(spec, weights=FILE)` alone (the spec
names specs/mappings/hf_timesformer.yaml). Parameter counts agree (reference = module = checker,
trainable and total) and last_hidden_state agrees within 1e-5 relative, at 8 frames and at 4
(the reference built for 4, so that its time table is not interpolated), at a reduced width and
depth in every run and at the default size (224 px, 768 wide, 12 layers) in the slow tier.
FLOPs agree with FlopCounterMode.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import archspec

from tests.conftest import ROOT
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, param_count, perturb_everything

pytest.importorskip("transformers")

SPEC = str(ROOT / "specs" / "timesformer.yaml")
SMALL = {"img": 64, "dim": 64, "heads": 4, "ffn": 128, "depth": 2}  # 16 patches a frame


def config_of(overrides: dict):
    """TimesformerConfig for the spec at these params (the spec's defaults are the config's)."""
    from transformers import TimesformerConfig

    names = {"img": "image_size", "patch": "patch_size", "frames": "num_frames", "dim": "hidden_size",
             "depth": "num_hidden_layers", "heads": "num_attention_heads", "ffn": "intermediate_size"}
    return TimesformerConfig(**{names[k]: v for k, v in overrides.items()})


def videos(batch: int, frames: int, size: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, frames, 3, size, size, generator=torch.Generator().manual_seed(seed))


class Pair:
    """Reference and ours at these params; ours loaded from the reference's own state dict file."""

    def __init__(self, overrides: dict, folder):
        from transformers import TimesformerModel

        torch.manual_seed(0)
        self.overrides = overrides
        self.ref = perturb_everything(TimesformerModel(config_of(overrides)).eval())
        path = folder / "timesformer.pt"
        torch.save(self.ref.state_dict(), path)
        self.report = archspec.check(SPEC, overrides or None)
        self.ours = archspec.build(SPEC, overrides or None, weights=str(path)).eval()

    def check_counts(self):
        trainable = lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad)  # noqa: E731
        assert param_count(self.ours) == self.report.params == param_count(self.ref)
        assert trainable(self.ours) == trainable(self.ref)

    def check_outputs(self, batch: int):
        frames, size = self.overrides.get("frames", 8), self.overrides.get("img", 224)
        x = videos(batch, frames, size)
        with torch.no_grad():
            expected, got = self.ref(pixel_values=x).last_hidden_state, self.ours(x)
        patches = (size // 16) ** 2
        assert got.shape == (batch, 1 + patches * frames, self.overrides.get("dim", 768))
        diff = close(expected, got)
        assert diff < TOL, diff


@pytest.mark.parametrize("frames", [8, 4])
def test_small_timesformer_is_exact(frames, tmp_path):
    pair = Pair({**SMALL, "frames": frames}, tmp_path)
    pair.check_counts()
    pair.check_outputs(batch=2)


def test_flops_match_flop_counter(tmp_path):
    pair = Pair({**SMALL, "frames": 4}, tmp_path)
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:  # (not under no_grad: FlopCounterMode then misses the conv)
        pair.ref(pixel_values=videos(1, 4, SMALL["img"]))
    assert pair.report.flops == pytest.approx(counter.get_total_flops(), rel=FLOPS_REL)


def test_every_mapped_weight_matters(tmp_path):
    """A wrong mapping that leaves a tensor unread would pass the comparison: every parameter
    gets a gradient (the time table, both attentions' norms and the temporal dense included)."""
    pair = Pair({**SMALL, "frames": 4}, tmp_path)
    pair.ours(videos(1, 4, SMALL["img"])).square().sum().backward()
    blind = [name for name, p in pair.ours.named_parameters() if p.grad is None or not bool(p.grad.abs().sum())]
    assert not blind


def test_a_video_classification_checkpoint_loads_its_model(tmp_path):
    """TimesformerForVideoClassification's state dict (the model under `timesformer.`, and a
    classifier) loads through the same mapping file: the classifier is left out, the outputs
    are its model's."""
    from transformers import TimesformerForVideoClassification

    overrides = {**SMALL, "frames": 4}
    torch.manual_seed(0)
    full = perturb_everything(TimesformerForVideoClassification(config_of(overrides)).eval())
    torch.save(full.state_dict(), tmp_path / "classifier.pt")
    assert any(k.startswith("classifier.") for k in full.state_dict())
    ours = archspec.build(SPEC, overrides, weights=str(tmp_path / "classifier.pt")).eval()
    assert param_count(ours) == param_count(full.timesformer)
    x = videos(2, 4, SMALL["img"])
    with torch.no_grad():
        assert close(full.timesformer(pixel_values=x).last_hidden_state, ours(x)) < TOL


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [{}, {"frames": 4}], ids=["default", "4 frames"])
def test_default_size_is_exact(overrides, tmp_path):
    """The spec as shipped: HF TimesformerConfig() (121 M parameters), and at 4 frames."""
    pair = Pair(overrides, tmp_path)
    pair.check_counts()
    pair.check_outputs(batch=1)
