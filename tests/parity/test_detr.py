"""DETR's transformer (Hugging Face's DetrModel after its backbone) in native words: every
attention adds its positions to the queries' and keys' inputs, not the values'
(`qk_positions: true`; DETR's with_pos_embed): the encoder's self-attention the feature map's
sine positions, the decoder's self-attention the object queries' learned positions, and its
cross-attention both (the queries', then the memory's). The DETR user trial wrote each of the
six attentions out of tensor ops (14 nodes each, no fused kernel); here each is one node.

Against the reference's encoder, decoder and heads at a tiny config (every parameter perturbed
by seeded noise, eager attention), fed the same flattened features and position embeddings:
parameter counts, the class logits and the boxes; positions on the values too (what a plain
`add` before the attention gives) make another output, so the comparison can fail."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

from tests.parity.test_vocabulary import perturb_everything

pytest.importorskip("transformers.models.detr")

SPEC = """\
archspec: 1
name: detr_transformer
params: {dim: 64, heads: 4, ffn: 128, tokens: 16, queries: 10, labels: 5, layers: 2}
inputs:
  features: [B, tokens, dim]      # the projected feature map, flattened
  pos: [B, tokens, dim]           # its sine position embedding, flattened
  target: [B, queries, dim]       # the decoder's first input (zeros in DETR)
blocks:
  encoder_layer:
    inputs: [x, pos]
    graph:
      - {id: self_attn, from: [x, pos], attention: {kind: global, heads: "${heads}", norm: post, qk_positions: true}}
      - {id: mlp, mlp: {hidden: "${ffn}", act: relu, norm: post}}
  decoder_layer:
    inputs: [x, memory, query_pos, pos]
    graph:
      - {id: self_attn, from: [x, query_pos], attention: {kind: global, heads: "${heads}", norm: post,
                                                          qk_positions: true}}
      - {id: encoder_attn, from: [self_attn, memory, query_pos, pos],
         attention: {kind: cross, heads: "${heads}", norm: post, qk_positions: true}}
      - {id: mlp, mlp: {hidden: "${ffn}", act: relu, norm: post}}
graph:
  - {id: encoder, from: [features, pos], repeat: "${layers}", encoder_layer: {}}
  - {id: query_pos, param: {shape: ["${queries}", "${dim}"]}}     # [1, Q, C]
  - {id: decoder, from: [target, encoder, query_pos, pos], repeat: "${layers}", decoder_layer: {}}
  - {id: layernorm, norm: {}}
  - {id: class_labels_classifier, linear: {dim: "${labels + 1}"}}
  - {id: box_1, from: layernorm, linear: {dim: "${dim}"}}
  - {id: box_1_relu, activation: {fn: relu}}
  - {id: box_2, linear: {dim: "${dim}"}}
  - {id: box_2_relu, activation: {fn: relu}}
  - {id: box_3, linear: {dim: 4}}
  - {id: boxes, activation: {fn: sigmoid}}
outputs: [class_labels_classifier, boxes]
"""

MAPPING = r"""
name: hf detr transformer
identify: ['^model\.query_position_embeddings\.weight$']
rules:
  - drop: ['^model\.backbone\.', '^model\.input_projection\.']
  - fuse:
      match: '^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.{part}\.(weight|bias)$'
      parts: [q_proj, k_proj, v_proj]
      into: qkv
  - fuse:
      match: '^model\.decoder\.layers\.(\d+)\.encoder_attn\.{part}\.(weight|bias)$'
      parts: [k_proj, v_proj]
      into: kv
  - rename:
      '^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.qkv\.': '\1.\2.self_attn.qkv.'
      '^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.o_proj\.': '\1.\2.self_attn.proj.'
      '^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn_layer_norm\.': '\1.\2.self_attn.norm.'
      '^model\.decoder\.layers\.(\d+)\.encoder_attn\.q_proj\.': 'decoder.\1.encoder_attn.q.'
      '^model\.decoder\.layers\.(\d+)\.encoder_attn\.kv\.': 'decoder.\1.encoder_attn.kv.'
      '^model\.decoder\.layers\.(\d+)\.encoder_attn\.o_proj\.': 'decoder.\1.encoder_attn.proj.'
      '^model\.decoder\.layers\.(\d+)\.encoder_attn_layer_norm\.': 'decoder.\1.encoder_attn.norm.'
      '^model\.(encoder|decoder)\.layers\.(\d+)\.mlp\.(fc1|fc2)\.': '\1.\2.mlp.\3.'
      '^model\.(encoder|decoder)\.layers\.(\d+)\.final_layer_norm\.': '\1.\2.mlp.norm.'
      '^model\.decoder\.layernorm\.': layernorm.
      '^model\.query_position_embeddings\.weight$': query_pos.value
      '^bbox_predictor\.layers\.(\d)\.': 'box_\1.'
  - reshape: {match: '^query_pos\.value$', shape: [1, '*']}
  - rename: {'^box_0\.': box_1., '^box_1\.': box_2., '^box_2\.': box_3.}
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import DetrConfig, DetrForObjectDetection

    config = DetrConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=10,
                        num_labels=5, use_timm_backbone=False, use_pretrained_backbone=False,
                        backbone_config={"model_type": "resnet", "depths": [1, 1, 1, 1],
                                         "hidden_sizes": [8, 8, 8, 8], "embedding_size": 8},
                        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = perturb_everything(DetrForObjectDetection(config).eval(), seed=1, scale=0.05)
    folder = tmp_path_factory.mktemp("detr")
    (folder / "detr.yaml").write_text(SPEC)
    (folder / "hf_detr.yaml").write_text(MAPPING)
    torch.save(ref.state_dict(), folder / "ref.pt")
    return ref, folder


def ours(pair, text=SPEC):
    _, folder = pair
    (folder / "variant.yaml").write_text(text)
    return archspec.build(str(folder / "variant.yaml"), weights=str(folder / "ref.pt"),
                          mapping=str(folder / "hf_detr.yaml")).eval()


def reference(ref, features, pos):
    """The reference's class logits [B, Q, labels + 1] and boxes [B, Q, 4] of flattened features
    and positions [B, N, C], every key kept, the decoder started from zeros (DetrModel.forward)."""
    B, N, _ = features.shape
    mask = torch.ones(B, N, dtype=torch.long)
    model = ref.model
    memory = model.encoder(inputs_embeds=features, attention_mask=mask,
                           spatial_position_embeddings=pos).last_hidden_state
    queries = model.query_position_embeddings.weight.unsqueeze(0).repeat(B, 1, 1)  # [B, Q, C]
    out = model.decoder(inputs_embeds=torch.zeros_like(queries), encoder_hidden_states=memory,
                        encoder_attention_mask=mask, spatial_position_embeddings=pos,
                        object_queries_position_embeddings=queries).last_hidden_state
    return ref.class_labels_classifier(out), ref.bbox_predictor(out).sigmoid()


def inputs(batch=2):
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(batch, 16, 64, generator=generator) for _ in range(2)] + [torch.zeros(batch, 10, 64)]


def test_parameter_counts(pair):
    ref, _ = pair
    model = ours(pair)
    theirs = sum(p.numel() for name, p in ref.named_parameters()
                 if not name.startswith(("model.backbone.", "model.input_projection.")))
    assert sum(p.numel() for p in model.parameters()) == theirs


def test_logits_and_boxes_as_hugging_faces(pair):
    ref, _ = pair
    features, pos, target = inputs()
    with torch.no_grad():
        (logits, boxes), (my_logits, my_boxes) = reference(ref, features, pos), ours(pair)(features, pos, target)
    assert (logits - my_logits).abs().max() < 1e-5, (logits - my_logits).abs().max()
    assert (boxes - my_boxes).abs().max() < 1e-5, (boxes - my_boxes).abs().max()


def test_positions_on_the_values_too_give_another_model(pair):
    ref, _ = pair
    on_values = SPEC.replace(
        "  - {id: self_attn, from: [x, pos], attention: {kind: global, heads: \"${heads}\", norm: post, "
        "qk_positions: true}}",
        "  - {id: with_pos, from: [x, pos], add: {}}\n"
        "      - {id: self_attn, attention: {kind: global, heads: \"${heads}\", norm: post}}")
    assert on_values != SPEC
    features, pos, target = inputs()
    with torch.no_grad():
        logits, _ = reference(ref, features, pos)
        assert (logits - ours(pair, on_values)(features, pos, target)[0]).abs().max() > 1e-3


def test_positions_that_do_not_fit_their_tokens_are_a_located_error():
    text = SPEC.replace("pos: [B, tokens, dim]", "pos: [B, tokens, 32]")
    with pytest.raises(SpecError) as info:
        archspec.check_text(text)
    assert "positions [B, 16, 32] do not fit the tokens [B, 16, 64]" in info.value.message
    assert info.value.loc.line == 12  # the encoder layer's self_attn


def test_cross_attention_with_positions_does_not_claim_a_cache():
    from archspec.primitives.decoding import Mixes, decode_of

    graph = archspec.check_text(SPEC).graph
    node = next(n for n in graph.nodes() if n.name.endswith("encoder_attn"))
    assert isinstance(decode_of(node), Mixes)
