"""RoBERTa's positions and padding rows (Hugging Face's XLMRobertaForMaskedLM), as the XLM-R user
trial asked: `embed: {pos_pad_id: 1, pos_offset: 2}` numbers the learned positions from the ids
(create_position_ids_from_input_ids: a padding token at row 1, the others at 1 + their count), and
`pad_id: 1` makes the token table's padding row nn.Embedding's padding_idx (zeros, never
trained). With `pos_offset: 2` alone the padding tokens, and every token of a left-padded
sequence, read other rows (the trial measured 0.67 at the padding; it took 15 nodes to say).

Against the reference with every parameter perturbed by seeded noise: parameter counts, the
logits of right- and left-padded sequences at every position, the padding rows' gradients with a
loss over every position; without pos_pad_id a left-padded sequence's logits differ."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

transformers = pytest.importorskip("transformers")

SPEC = """\
archspec: 1
name: xlmr_mlm
params: {vocab: 300, dim: 64, depth: 2, heads: 4, ffn: 128, max_pos: 40, eps: 1.0e-12}
dims:
  L: [1, "${max_pos - 2}"]
inputs:
  input_ids: {shape: [B, L], dtype: int64}
  token_type_ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
targets:
  labels: {shape: [B, L], dtype: int64}
blocks:
  layer:
    inputs: [x, mask]
    graph:
      - id: attn
        from: [x, mask]
        attention: {kind: global, heads: "${heads}", norm: post, norm_eps: "${eps}", padding_mask: true}
      - id: mlp
        mlp: {hidden: "${ffn}", act: gelu, norm: post, norm_eps: "${eps}"}
graph:
  - id: embed
    from: [input_ids, token_type_ids]
    embed: {vocab: "${vocab}", dim: "${dim}", pos: learned, max_len: "${max_pos - 2}", pos_offset: 2,
            types: 2 PADDING}
  - id: embed_norm
    norm: {eps: "${eps}"}
  - id: layers
    repeat: ${depth}
    from: [embed_norm, attention_mask]
    layer: {}
  - id: dense
    linear: {dim: "${dim}"}
  - id: act
    activation: {fn: gelu}
  - id: head_norm
    norm: {eps: "${eps}"}
  - id: head
    head: {kind: lm, tie: embed, bias: true}
outputs: {logits: head}
objectives:
  - id: mlm
    from: [head, labels]
    loss: {kind: cross_entropy, ignore_index: -100}
mappings: [hf_xlmr.yaml]
"""
PADDING = ", pos_pad_id: 1, pad_id: 1"

MAPPING = r"""
archspec: 1
name: hf xlm-roberta mlm
identify: ['^roberta\.embeddings\.position_embeddings\.weight$']
rules:
  - drop: ['\.position_ids$', '\.token_type_ids$', '^lm_head\.decoder\.(weight|bias)$']
  - rename:
      '^roberta\.': ''
  - fuse:
      match: '^encoder\.layer\.(\d+)\.attention\.self\.{part}\.(weight|bias)$'
      parts: [query, key, value]
      into: qkv
  - rename:
      '^embeddings\.word_embeddings\.': embed.tokens.
      '^embeddings\.position_embeddings\.': embed.pos.
      '^embeddings\.token_type_embeddings\.': embed.types.
      '^embeddings\.LayerNorm\.': embed_norm.
      '^encoder\.layer\.(\d+)\.attention\.self\.qkv\.': 'layers.\1.attn.qkv.'
      '^encoder\.layer\.(\d+)\.attention\.output\.dense\.': 'layers.\1.attn.proj.'
      '^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.': 'layers.\1.attn.norm.'
      '^encoder\.layer\.(\d+)\.intermediate\.dense\.': 'layers.\1.mlp.fc1.'
      '^encoder\.layer\.(\d+)\.output\.dense\.': 'layers.\1.mlp.fc2.'
      '^encoder\.layer\.(\d+)\.output\.LayerNorm\.': 'layers.\1.mlp.norm.'
      '^lm_head\.dense\.': dense.
      '^lm_head\.layer_norm\.': head_norm.
      '^lm_head\.bias$': head.bias
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("xlmr")
    (folder / "hf_xlmr.yaml").write_text(MAPPING)
    (folder / "xlmr.yaml").write_text(SPEC.replace("PADDING", PADDING))
    (folder / "xlmr_offset_only.yaml").write_text(SPEC.replace("PADDING", ""))
    config = transformers.XLMRobertaConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=128, max_position_embeddings=40, pad_token_id=1,
                                           type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    ref = transformers.XLMRobertaForMaskedLM(config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=generator))
    torch.save(ref.state_dict(), folder / "ref.pt")
    return folder, ref


def padded_batch():
    """Three sequences of 12: whole, right-padded (8 tokens), left-padded (7 tokens); pad id 1."""
    ids = torch.randint(3, 300, (3, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 8:], mask[2, :5] = 0, 0
    return torch.where(mask.bool(), ids, torch.ones_like(ids)), torch.zeros_like(ids), mask


def built(folder, name="xlmr.yaml"):
    return archspec.build(str(folder / name), weights=str(folder / "ref.pt"))


def test_roberta_positions_equal_hugging_face_at_every_position(folder):
    folder, ref = folder
    ours, ref = built(folder).eval(), ref.eval()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    ids, types, mask = padded_batch()
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        assert (ours(ids, types, mask) - theirs).abs().max() < 1e-5  # the padding's rows too
        offset_only = built(folder, "xlmr_offset_only.yaml").eval()(ids, types, mask)
    assert (offset_only[2, 5:] - theirs[2, 5:]).abs().max() > 1e-2  # a left-padded sequence's real tokens


def test_the_padding_rows_are_not_trained_as_hugging_faces(folder):
    folder, ref = folder
    ours, ref = built(folder).train(), ref.train()
    ids, types, mask = padded_batch()
    labels = torch.randint(0, 300, ids.shape, generator=torch.Generator().manual_seed(3))  # every position read
    ref(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss.backward()
    ours.loss(ids, types, mask, labels).backward()
    tokens, positions = ours.embed.tokens.weight.grad, ours.embed.pos.weight.grad
    embeddings = ref.roberta.embeddings
    assert torch.equal(positions[1], torch.zeros(64))  # (the token table's row 1 is the tied head's too)
    assert (tokens - embeddings.word_embeddings.weight.grad).abs().max() < 1e-5
    assert (positions - embeddings.position_embeddings.weight.grad).abs().max() < 1e-5
    assert built(folder, "xlmr_offset_only.yaml").embed.tokens.padding_idx is None


@pytest.mark.parametrize("options,words", [
    (", pos_pad_id: 0", "pos_pad_id 0 puts the first token at row 1, and pos_offset says row 2"),
    (", pad_id: 300", "pad_id 300 is outside the table of 300 rows"),
])
def test_padding_rows_that_cannot_be_are_located_errors(options, words):
    with pytest.raises(SpecError) as info:
        archspec.check_text(SPEC.replace("PADDING", options), name="xlmr.yaml")
    assert words in str(info.value) and "xlmr.yaml:" in str(info.value)


def test_a_computed_integer_tensor_is_no_token_ids_and_the_error_says_so():
    text = SPEC.replace("PADDING", "").replace("from: [input_ids, token_type_ids]",
                                               "from: [doubled, token_type_ids]")
    text = text.replace("graph:\n  - id: embed", "graph:\n  - {id: doubled, from: input_ids, compare: {op: ne, "
                                                 "value: 1}}\n  - id: embed", 1)
    with pytest.raises(SpecError) as info:
        archspec.check_text(text, name="xlmr.yaml")
    assert "embed reads token ids" in info.value.message
    assert "is a computed tensor, not token ids" in info.value.hint
