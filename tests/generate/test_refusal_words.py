"""A refusal says how generate read the inputs: a spec taking an image and token types beside
its ids is read as an encoder-decoder (source, source padding mask, target ids), and the
PaliGemma trial was told only that its attention sees later tokens."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

SPEC = """
name: image_ids_types
dims: {L: [1, 16]}
inputs:
  pixel_values: [B, 3, 16, 16]
  input_ids: {shape: [B, L], dtype: int64}
  token_type_ids: {shape: [B, L], dtype: int64}
graph:
  - {id: image, from: pixel_values, patchify: {patch: 8, dim: 16}}
  - {id: pooled, reduce: {fn: mean, axes: [1], keepdim: true}}
  - {id: text, from: [input_ids, token_type_ids], embed: {vocab: 20, dim: 16, pos: none, types: 2}}
  - {id: joined, from: [text, pooled], add: {}}
  - {id: attn, attention: {kind: global, heads: 2}}
  - {id: head, head: {kind: lm, vocab: 20}}
"""


def test_the_refusal_says_how_the_inputs_were_read():
    model = archspec.build_text(SPEC).eval()
    with pytest.raises(SpecError) as info:
        model.generate(torch.tensor([[1, 2, 3]]))
    message = info.value.diagnostics[0].message
    assert ("taken as an encoder-decoder (source 'pixel_values', source padding mask 'input_ids', target ids "
            "'token_type_ids')") in message


ENCODER = """
name: masked_encoder
dims: {L: [1, 16]}
inputs:
  input_ids: {shape: [B, L], dtype: int64}
  attention_mask: {shape: [B, L], dtype: int64}
graph:
  - {id: text, from: input_ids, embed: {vocab: 20, dim: 16, pos: none}}
  - {id: attn, from: [text, attention_mask], attention: {kind: global, heads: 2, padding_mask: true}}
  - {id: head, head: {kind: lm, vocab: 20}}
"""


def test_an_encoders_attention_mask_is_not_called_target_ids():
    """The ModernBERT trial was told its encoder was "taken as an encoder-decoder (source
    'input_ids', target ids 'attention_mask')": the refusal was right, the reading wrong."""
    model = archspec.build_text(ENCODER).eval()
    with pytest.raises(SpecError) as info:
        model.generate(torch.tensor([[1, 2, 3]]))
    message = info.value.diagnostics[0].message
    assert "encoder-decoder (" not in message and "target ids 'attention_mask'" not in message
    assert "read as token ids and 'attention_mask' as its attention's padding mask" in message
    assert "'attn': it lets a token see later tokens" in message
