"""Pixtral's vision encoder (Hugging Face's PixtralVisionModel) in native words: its 2-D rotary
gives the rows the even frequencies of one 1-D rotary over the head and the columns the odd
ones, `rotary_grid: {frequencies: alternating}`. The Pixtral user trial found timm's per-axis
frequencies 1.75e-3 off and wrote the attention out as tensor ops (74 nodes for 6); here it is
one fused attention a layer again. Against the reference at a tiny config (every parameter
perturbed by seeded noise): counts, the last hidden state on a square and a wide image; the
per-axis frequencies give another output, so the comparison can fail."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers.models.pixtral")

SPEC = """\
archspec: 1
name: pixtral_tiny
params: {height: 32, width: 32, patch: 8, dim: 64, heads: 4, layers: 2, hidden: 128, frequencies: alternating}
inputs:
  image: [B, 3, height, width]
graph:
  - {id: patch_conv, patchify: {patch: "${patch}", dim: "${dim}", bias: false, pos: none}}
  - {id: ln_pre, norm: {kind: rms, eps: 1.0e-5}}
  - id: layers
    repeat: ${layers}
    graph:
      - id: attn
        attention: {kind: global, heads: "${heads}", qkv_bias: false, proj_bias: false, norm_kind: rms,
                    norm_eps: 1.0e-5, scores: [{rotary_grid: {interleaved: false, frequencies: "${frequencies}"}}]}
      - id: mlp
        mlp: {hidden: "${hidden}", act: silu, gated: true, bias: false, norm_kind: rms, norm_eps: 1.0e-5}
outputs: [layers]
"""

MAPPING = r"""
name: hf pixtral vision
identify: ['^patch_conv\.weight$', '^ln_pre\.weight$']
rules:
  - fuse:
      match: '^transformer\.layers\.(\d+)\.attention\.{part}\.weight$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - fuse:
      match: '^transformer\.layers\.(\d+)\.feed_forward\.{part}\.weight$'
      parts: [gate_proj, up_proj]
      into: fc1
  - rename:
      '^patch_conv\.weight$': patch_conv.proj.weight
      '^transformer\.layers\.(\d+)\.attention\.qkv\.': 'layers.\1.attn.qkv.'
      '^transformer\.layers\.(\d+)\.attention\.o_proj\.': 'layers.\1.attn.proj.'
      '^transformer\.layers\.(\d+)\.attention_norm\.': 'layers.\1.attn.norm.'
      '^transformer\.layers\.(\d+)\.feed_forward\.fc1\.': 'layers.\1.mlp.fc1.'
      '^transformer\.layers\.(\d+)\.feed_forward\.down_proj\.': 'layers.\1.mlp.fc2.'
      '^transformer\.layers\.(\d+)\.ffn_norm\.': 'layers.\1.mlp.norm.'
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import PixtralVisionConfig, PixtralVisionModel

    config = PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 image_size=64, patch_size=8, num_channels=3, hidden_act="silu")
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = perturb_everything(PixtralVisionModel(config).eval(), seed=1, scale=0.1)
    folder = tmp_path_factory.mktemp("pixtral")
    (folder / "pixtral.yaml").write_text(SPEC)
    (folder / "hf_pixtral.yaml").write_text(MAPPING)
    torch.save({k: v for k, v in ref.state_dict().items() if "inv_freq" not in k}, folder / "ref.pt")
    return ref, folder


def ours(pair, **overrides):
    _, folder = pair
    return archspec.build(str(folder / "pixtral.yaml"), overrides, weights=str(folder / "ref.pt"),
                          mapping=str(folder / "hf_pixtral.yaml")).eval()


def reference_output(ref, image):
    """PixtralVisionModel's last hidden state of one image [1, 3, H, W]: [1, H*W, 64]."""
    return ref(image, image_sizes=torch.tensor([list(image.shape[2:])])).last_hidden_state


@pytest.mark.parametrize("height, width", [(32, 32), (32, 48)])
def test_the_last_hidden_state_as_hugging_faces(pair, height, width):
    ref, _ = pair
    model = ours(pair, height=height, width=width)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    image = torch.randn(1, 3, height, width, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs, mine = reference_output(ref, image), model(image)  # [1, H*W, 64] both
    assert theirs.shape == mine.shape and (theirs - mine).abs().max() < 1e-5, (theirs - mine).abs().max()


def test_timms_per_axis_frequencies_give_another_output(pair):
    ref, _ = pair
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        gap = (ours(pair, frequencies="per_axis")(image) - reference_output(ref, image)).abs().max()
    assert gap > 1e-4
