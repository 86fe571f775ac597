"""DINOv3's ViT (Hugging Face's DINOv3ViTModel) in native words: its 2-D rotary puts each patch at
its centre on [-1, 1], times 2 pi (`rotary_grid: {positions: centres}`), over timm's per-axis
frequencies with theta 100, rotate-half, the class and register tokens unrotated; k without a
bias (`qkv_bias: qv`), LayerScale on both branches. The DINOv3 user trial found the rotary had no
word (cell indices: 0.034 off) and wrote each attention out of 30 nodes (88 in all, no fused
kernel); here each layer is two nodes again.

Against the reference at a tiny config (eval mode, every parameter perturbed by seeded noise):
parameter counts (its mask token, read only when masking, left out), the last hidden state and
the pooled class token at two image sizes; cell positions give another output, so the
comparison can fail."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers.models.dinov3_vit")

SPEC = """\
archspec: 1
name: dinov3_tiny
params: {img: 32, patch: 8, dim: 64, heads: 4, layers: 2, hidden: 128, registers: 4, theta: 100.0, eps: 1.0e-5,
         positions: centres}
inputs:
  image: [B, 3, img, img]
graph:
  - {id: embeddings, patchify: {patch: "${patch}", dim: "${dim}", cls_token: "${1 + registers}", pos: none}}
  - id: layer
    repeat: ${layers}
    graph:
      - id: attn
        attention: {kind: global, heads: "${heads}", qkv_bias: qv, norm_eps: "${eps}", layer_scale: 1.0,
                    scores: [{rotary_grid: {theta: "${theta}", interleaved: false, positions: "${positions}"}}]}
      - {id: mlp, mlp: {hidden: "${hidden}", act: gelu, norm_eps: "${eps}", layer_scale: 1.0}}
  - {id: norm, norm: {eps: "${eps}"}}
  - {id: pooled, slice: {stop: 1}}
outputs: {last_hidden_state: norm, pooler_output: pooled}
"""

MAPPING = r"""
name: hf dinov3 vit
identify: ['^embeddings\.register_tokens$']
rules:
  - drop: ['^embeddings\.mask_token$']
  - fuse:
      match: '^embeddings\.{part}$'
      parts: [cls_token, register_tokens]
      into: prefix
      dim: 1
  - fuse:
      match: '^model\.layer\.(\d+)\.attention\.{part}\.weight$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - rename:
      '^embeddings\.prefix$': embeddings.cls_token
      '^embeddings\.patch_embeddings\.': embeddings.proj.
      '^model\.layer\.(\d+)\.norm1\.': 'layer.\1.attn.norm.'
      '^model\.layer\.(\d+)\.attention\.qkv\.': 'layer.\1.attn.qkv.'
      '^model\.layer\.(\d+)\.attention\.q_proj\.bias$': 'layer.\1.attn.q_bias'
      '^model\.layer\.(\d+)\.attention\.v_proj\.bias$': 'layer.\1.attn.v_bias'
      '^model\.layer\.(\d+)\.attention\.o_proj\.': 'layer.\1.attn.proj.'
      '^model\.layer\.(\d+)\.layer_scale1\.lambda1$': 'layer.\1.attn.layer_scale.gamma'
      '^model\.layer\.(\d+)\.norm2\.': 'layer.\1.mlp.norm.'
      '^model\.layer\.(\d+)\.mlp\.up_proj\.': 'layer.\1.mlp.fc1.'
      '^model\.layer\.(\d+)\.mlp\.down_proj\.': 'layer.\1.mlp.fc2.'
      '^model\.layer\.(\d+)\.layer_scale2\.lambda1$': 'layer.\1.mlp.layer_scale.gamma'
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    config = DINOv3ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                             intermediate_size=128, num_register_tokens=4)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = perturb_everything(DINOv3ViTModel(config).eval(), seed=1, scale=0.05)
    folder = tmp_path_factory.mktemp("dinov3")
    (folder / "dinov3.yaml").write_text(SPEC)
    (folder / "hf_dinov3.yaml").write_text(MAPPING)
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


def ours(pair, **overrides):
    _, folder = pair
    return archspec.build(str(folder / "dinov3.yaml"), overrides, weights=str(folder / "ref.pt"),
                          mapping=str(folder / "hf_dinov3.yaml")).eval()


def image(size):
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(3))


def test_parameter_counts(pair):
    ref, _ = pair
    theirs = sum(p.numel() for name, p in ref.named_parameters() if name != "embeddings.mask_token")
    assert sum(p.numel() for p in ours(pair).parameters()) == theirs


@pytest.mark.parametrize("size", [32, 48])
def test_the_hidden_states_and_the_pooled_token_as_hugging_faces(pair, size):
    ref, _ = pair
    with torch.no_grad():
        theirs, mine = ref(image(size)), ours(pair, img=size)(image(size))
    assert (theirs.last_hidden_state - mine.last_hidden_state).abs().max() < 1e-5
    assert (theirs.pooler_output - mine.pooler_output[:, 0]).abs().max() < 1e-5


def test_cell_positions_give_another_output(pair):
    ref, _ = pair
    with torch.no_grad():
        gap = (ref(image(32)).last_hidden_state - ours(pair, positions="cells")(image(32)).last_hidden_state)
    assert gap.abs().max() > 1e-3
