"""Wav2Vec2's encoder (Hugging Face's Wav2Vec2Model, base layout) in native words: its positional
conv is weight-normed (`conv: {weight_norm: 2}`: g [1, 1, K] and v [C, C / groups, K] as the
parameters, the weight g * v / ||v||), and its SamePadLayer drops the last output (`slice: {stop:
-1}`). The Wav2Vec2 user trial wrote the weight norm out of 15 nodes (the grouped conv of a
computed weight unfolded by hand), or folded g and v into one weight before loading, which lost
them as parameters.

Against the reference at a tiny config (every parameter perturbed by seeded noise, g far from
||v||): parameter counts, the last hidden state of 800 samples, and the gradients of g and v
after a loss on it; the plain weight v alone (the weight norm left out) gives another output, so
the comparison can fail."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers.models.wav2vec2")

SPEC = """\
archspec: 1
name: wav2vec2_tiny
params: {samples: 800, conv_dim: [16, 16, 16], conv_kernel: [10, 3, 3], conv_stride: [5, 2, 2], dim: 32, depth: 2,
         heads: 4, ffn: 64, pos_kernel: 16, pos_groups: 4, eps: 1.0e-5, norm_axis: 2}
inputs:
  input_values: [B, samples]
graph:
  - {id: audio, rearrange: {pattern: "b n -> b n 1", as: tokens}}     # [B, 800, 1]
  - {id: conv0, conv: {dim: 1, out: "${conv_dim[0]}", kernel: "${conv_kernel[0]}", stride: "${conv_stride[0]}",
                       bias: false}}
  - {id: conv0_norm, norm: {kind: group, groups: "${conv_dim[0]}", eps: 1.0e-5}}
  - {id: conv0_act, activation: {fn: gelu}}
  - id: convs
    repeat: ${len(conv_dim) - 1}
    graph:
      - {id: conv, conv: {dim: 1, out: "${conv_dim[i + 1]}", kernel: "${conv_kernel[i + 1]}",
                          stride: "${conv_stride[i + 1]}", bias: false}}
      - {id: act, activation: {fn: gelu}}
  - {id: feat_norm, norm: {eps: "${eps}"}}
  - {id: projection, linear: {dim: "${dim}"}}
  - id: pos_conv                # weight_norm(Conv1d, dim=2), padded K/2 on both sides
    conv: {dim: 1, kernel: "${pos_kernel}", padding: "${pos_kernel // 2}", groups: "${pos_groups}",
           weight_norm: "${norm_axis}"}
  - {id: pos_same, slice: {stop: -1}}                                  # SamePadLayer: the last output dropped
  - {id: pos_act, activation: {fn: gelu}}
  - {id: with_pos, from: [projection, pos_act], add: {}}
  - {id: enc_norm, norm: {eps: "${eps}"}}
  - id: layers
    repeat: ${depth}
    graph:
      - {id: attn, attention: {kind: global, heads: "${heads}", norm: post, norm_eps: "${eps}"}}
      - {id: mlp, mlp: {hidden: "${ffn}", act: gelu, norm: post, norm_eps: "${eps}"}}
outputs: [layers]
"""

MAPPING = r"""
name: hf wav2vec2
identify: ['^feature_extractor\.conv_layers\.0\.conv\.weight$']
rules:
  - drop: ['^masked_spec_embed$']
  - fuse:
      match: '^encoder\.layers\.(\d+)\.attention\.{part}\.(weight|bias)$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - rename:
      '^feature_extractor\.conv_layers\.0\.conv\.': conv0.conv.
      '^feature_extractor\.conv_layers\.0\.layer_norm\.': conv0_norm.
      '^feature_extractor\.conv_layers\.(\d+)\.conv\.': 'convs.${g1 - 1}.conv.conv.'
      '^feature_projection\.layer_norm\.': feat_norm.
      '^feature_projection\.projection\.': projection.
      '^encoder\.pos_conv_embed\.conv\.parametrizations\.weight\.original0$': pos_conv.conv.weight_g
      '^encoder\.pos_conv_embed\.conv\.parametrizations\.weight\.original1$': pos_conv.conv.weight_v
      '^encoder\.pos_conv_embed\.conv\.bias$': pos_conv.conv.bias
      '^encoder\.layer_norm\.': enc_norm.
      '^encoder\.layers\.(\d+)\.attention\.qkv\.': 'layers.\1.attn.qkv.'
      '^encoder\.layers\.(\d+)\.attention\.out_proj\.': 'layers.\1.attn.proj.'
      '^encoder\.layers\.(\d+)\.layer_norm\.': 'layers.\1.attn.norm.'
      '^encoder\.layers\.(\d+)\.feed_forward\.intermediate_dense\.': 'layers.\1.mlp.fc1.'
      '^encoder\.layers\.(\d+)\.feed_forward\.output_dense\.': 'layers.\1.mlp.fc2.'
      '^encoder\.layers\.(\d+)\.final_layer_norm\.': 'layers.\1.mlp.norm.'
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                            conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, hidden_dropout=0.0,
                            attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = perturb_everything(Wav2Vec2Model(config).eval(), seed=1, scale=0.05)
    with torch.no_grad():  # g well away from ||v||: the weight norm must matter
        ref.encoder.pos_conv_embed.conv.parametrizations.weight.original0.mul_(
            1 + torch.rand(1, 1, 16, generator=torch.Generator().manual_seed(2)))
    folder = tmp_path_factory.mktemp("wav2vec2")
    (folder / "wav2vec2.yaml").write_text(SPEC)
    (folder / "hf_wav2vec2.yaml").write_text(MAPPING)
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


def ours(pair, **overrides):
    _, folder = pair
    return archspec.build(str(folder / "wav2vec2.yaml"), overrides, weights=str(folder / "ref.pt"),
                          mapping=str(folder / "hf_wav2vec2.yaml")).eval()


def audio():
    return torch.randn(2, 800, generator=torch.Generator().manual_seed(3))


def test_parameter_counts(pair):
    ref, folder = pair
    model = ours(pair)
    theirs = sum(p.numel() for name, p in ref.named_parameters() if name != "masked_spec_embed")
    assert sum(p.numel() for p in model.parameters()) == theirs
    assert archspec.check(str(folder / "wav2vec2.yaml")).params == theirs


def test_the_last_hidden_state_and_the_weight_norms_gradients(pair):
    ref, _ = pair
    model = ours(pair)
    x = audio()
    theirs, mine = ref(x).last_hidden_state, model(x)  # [2, 49, 32] both
    assert (theirs - mine).abs().max() < 1e-5, (theirs - mine).abs().max()
    theirs.pow(2).mean().backward()
    mine.pow(2).mean().backward()
    weight = ref.encoder.pos_conv_embed.conv.parametrizations.weight
    conv = model.get_submodule("pos_conv.conv")
    assert (weight.original0.grad - conv.weight_g.grad).abs().max() < 1e-6
    assert (weight.original1.grad - conv.weight_v.grad).abs().max() < 1e-6


def test_the_plain_weight_gives_another_output(pair):
    ref, _ = pair
    model = ours(pair)
    conv = model.get_submodule("pos_conv")
    conv.weight_norm = None
    conv.conv.weight = conv.conv.weight_v  # v alone, as a conv without weight_norm would take it
    with torch.no_grad():
        assert (ref(audio()).last_hidden_state - model(audio())).abs().max() > 1e-3


def test_an_axis_the_weight_lacks_is_a_located_error(pair):
    _, folder = pair
    with pytest.raises(archspec.SpecError, match="weight_norm 3 is not an axis of a 1-D conv's weight"):
        archspec.check(str(folder / "wav2vec2.yaml"), {"norm_axis": 3})
