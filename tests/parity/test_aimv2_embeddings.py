"""patchify's `norm_kind: rms`: AIMv2's patch embedding (a conv, an RMSNorm, then the learned
positions) against Hugging Face's Aimv2VisionEmbeddings, every parameter perturbed; the AIMv2
trial wrote it as patchify without norm, a norm node, a param and an add (4 nodes for 1)."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")

SPEC = """\
name: aimv2_embed
inputs:
  image: [B, 3, 32, 32]
graph:
  - {id: patch_embed, patchify: {patch: 8, dim: 48, norm: true, norm_kind: rms, norm_eps: 1.0e-5, pos: learned}}
"""


def test_the_rms_normed_patch_embedding_is_aimv2s():
    from transformers import Aimv2VisionConfig
    from transformers.models.aimv2.modeling_aimv2 import Aimv2VisionEmbeddings

    config = Aimv2VisionConfig(hidden_size=48, image_size=32, patch_size=8, rms_norm_eps=1e-5, num_channels=3)
    torch.manual_seed(0)
    ref = perturb_everything(Aimv2VisionEmbeddings(config), seed=1, scale=0.05, norm_scale=0.3).eval()
    model = archspec.build_text(SPEC).eval()
    state = ref.state_dict()
    mine = {"patch_embed.proj.weight": state["patch_embed.weight"], "patch_embed.proj.bias": state["patch_embed.bias"],
            "patch_embed.norm.weight": state["rms_norm.weight"],
            "patch_embed.pos_embed": state["position_embedding.weight"][None]}
    model.load_state_dict(mine)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters()) == \
        archspec.check_text(SPEC).params
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (model(x) - ref(x)).abs().max() < 1e-5
        layer = archspec.build_text(SPEC.replace("norm_kind: rms", "norm_kind: layer")).eval()
        assert layer.patch_embed.norm.__class__.__name__ == "LayerNorm"


def test_norm_kind_without_norm_is_an_error():
    with pytest.raises(archspec.SpecError, match="norm_kind goes with norm: true"):
        archspec.check_text(SPEC.replace("norm: true, ", ""))
