"""MLCD's vision tower (Hugging Face's MLCDVisionModel) in native words: 2-D rotary positions
over the patches and the class token turned by a learned angle vector (`class_pos_emb`), one
tensor every layer reads. The MLCD user trial wrote its attention out (29 nodes a layer, no
fused kernel) because `rotary_grid` left the class token unrotated; `prefix_angles` names the
angles. Against the reference at a tiny config, every parameter perturbed by seeded noise:
parameter counts, last_hidden_state and pooler_output at two image sizes; without the class
angles the outputs part (so the comparison can fail)."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers.models.mlcd")

SPEC = """\
archspec: 1
name: mlcd_tiny
params: {img: 32, patch: 8, dim: 32, depth: 2, heads: 4, hidden: 64, eps: 1.0e-5}
inputs:
  image: [B, 3, img, img]
blocks:
  layer:
    inputs: [x, angles]
    graph:
      - id: attn
        from: [x, angles]
        attention:
          kind: global
          heads: ${heads}
          norm_eps: ${eps}
          scores: [{rotary_grid: {interleaved: false, indexing: ij, prefix_angles: angles}}]
      - {id: mlp, mlp: {hidden: "${hidden}", act: gelu, norm_eps: "${eps}"}}
graph:
  - {id: class_pos_emb, param: {shape: [1, "${dim // heads // 2}"], init: normal}}
  - {id: patch_embed, from: image, patchify: {patch: "${patch}", dim: "${dim}", bias: false, cls_token: true, pos: none}}
  - {id: pre_norm, norm: {eps: "${eps}"}}
  - {id: layers, repeat: "${depth}", from: [pre_norm, class_pos_emb], layer: {}}
  - {id: cls, from: layers, select: {index: 0}}
  - {id: post_norm, norm: {eps: "${eps}"}}
outputs: {last_hidden_state: layers, pooler_output: post_norm}
"""

MAPPING = r"""
name: hf mlcd
identify: ['class_pos_emb$']
rules:
  - fuse: {match: '^(.*\.self_attn)\.{part}\.(weight|bias)$', parts: [q_proj, k_proj, v_proj], into: qkv}
  - rename:
      '^class_pos_emb$': class_pos_emb.value
      '^embeddings\.class_embedding$': patch_embed.cls_token
      '^embeddings\.patch_embedding\.': patch_embed.proj.
      '^pre_layrnorm\.': pre_norm.
      '^post_layernorm\.': post_norm.
      '^encoder\.layers\.(\d+)\.self_attn\.qkv\.': 'layers.\1.attn.qkv.'
      '^encoder\.layers\.(\d+)\.self_attn\.out_proj\.': 'layers.\1.attn.proj.'
      '^encoder\.layers\.(\d+)\.layer_norm1\.': 'layers.\1.attn.norm.'
      '^encoder\.layers\.(\d+)\.layer_norm2\.': 'layers.\1.mlp.norm.'
      '^encoder\.layers\.(\d+)\.mlp\.': 'layers.\1.mlp.'
  - reshape: {match: '^patch_embed\.cls_token$', shape: [1, 1, '*']}
  - reshape: {match: '^class_pos_emb\.value$', shape: [1, '*']}
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import MLCDVisionConfig, MLCDVisionModel

    config = MLCDVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                              image_size=32, patch_size=8)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = perturb_everything(MLCDVisionModel(config).eval(), seed=1, scale=0.5)
    folder = tmp_path_factory.mktemp("mlcd")
    (folder / "mlcd.yaml").write_text(SPEC)
    (folder / "hf_mlcd.yaml").write_text(MAPPING)
    torch.save({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "ref.pt")
    return ref, folder


def ours(pair, **overrides):
    _, folder = pair
    return archspec.build(str(folder / "mlcd.yaml"), overrides, weights=str(folder / "ref.pt"),
                          mapping=str(folder / "hf_mlcd.yaml")).eval()


def gap(ref, model, size=32):
    """The largest |difference| of either output over that output's largest |value| (the hidden
    states reach 60 with these weights: fp32 rounding is some 1e-5 of them)."""
    image = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, got = ref(pixel_values=image), model(image)
    return max(float((w - g).abs().max() / w.abs().max()) for w, g in
               ((want.last_hidden_state, got.last_hidden_state), (want.pooler_output, got.pooler_output)))


def test_parameter_counts_and_outputs_at_two_sizes(pair):
    ref, _ = pair
    model = ours(pair)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ref.parameters())
    assert gap(ref, model) < 3e-6
    assert gap(ref, ours(pair, img=48), size=48) < 3e-6


def test_the_class_token_left_unturned_parts_from_it(pair):
    """Zero angles leave the class token as it is (cos 1, sin 0): not the reference."""
    ref, _ = pair
    model = ours(pair)
    with torch.no_grad():
        model.class_pos_emb.value.zero_()
    assert gap(ref, model) > 1e-3


def test_prefix_angles_of_the_wrong_shape_or_without_a_prefix_are_located_errors():
    wrong = SPEC.replace('shape: [1, "${dim // heads // 2}"]', "shape: [1, 3]")
    with pytest.raises(archspec.SpecError, match=r"prefix_angles 'angles' must be float \[1, 1, 4\]"):
        archspec.check_text(wrong)
    no_prefix = SPEC.replace("cls_token: true", "cls_token: false")
    with pytest.raises(archspec.SpecError, match="prefix_angles turn the prefix .class. tokens, and these tokens have"):
        archspec.check_text(no_prefix)
