"""A prompt that begins with the embedding's padding row while neither an attention_mask nor
pad_token_id says what is padding: Hugging Face's generate takes pad_token_id from the model's
config (Gemma's is 0) and masks those tokens; generate here reads them as tokens, as documented,
and now says so (the Gemma 2 trial's step scores were 5.98 apart without a word)."""

from __future__ import annotations

import logging

import torch

import archspec

SPEC = """
name: tiny_lm
dims: {L: [1, 32]}
inputs: {ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: 20, dim: 16, pos: none, pad_id: 0}}
  - {id: attn, attention: {kind: causal, heads: 2, rope_theta: 10000.0}}
  - {id: head, head: {kind: lm, vocab: 20}}
"""


def pad_warnings(caplog, ids, **kwargs):
    model = archspec.build_text(SPEC, seed=0).eval()
    with caplog.at_level(logging.WARNING, logger="archspec"):
        caplog.clear()
        model.generate(ids, max_new_tokens=2, **kwargs)
    return [r.getMessage() for r in caplog.records if "the embedding's pad_id" in r.getMessage()]


def test_a_prompt_beginning_with_pad_id_is_told(caplog):
    leading = torch.tensor([[0, 0, 5, 6], [3, 4, 5, 6]])
    (said,) = pad_warnings(caplog, leading)
    assert said.startswith("archspec: generate: a prompt begins with 0, the embedding's pad_id")
    assert "pass pad_token_id=0 (or an attention_mask)" in said
    assert pad_warnings(caplog, leading, pad_token_id=0) == []  # said: masked, as Hugging Face's
    assert pad_warnings(caplog, leading, attention_mask=torch.ones_like(leading)) == []  # said: tokens
    assert pad_warnings(caplog, torch.tensor([[3, 0, 5, 6]])) == []  # not leading: a token
