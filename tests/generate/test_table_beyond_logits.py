"""A prompt may hold any id of the token table, also one the logits do not cover: MusicGen's
start token is row 64 of a table of 65 rows beside 64 logits. generate refused it ("outside
the vocabulary (0..63)") though forward takes it (the MusicGen trial); ids beyond the table
are still refused."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """
name: start_row
dims: {L: [1, 32]}
inputs:
  input_ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 17, dim: 32, max_len: 32}}
  - {id: attn, attention: {kind: causal, heads: 2}}
  - {id: head, head: {kind: lm, vocab: 16}}
"""


def test_a_start_token_beyond_the_logits_but_in_the_table_is_taken():
    torch.manual_seed(0)
    model = archspec.build_text(SPEC).eval()
    prompt = torch.tensor([[16, 3, 5]])
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=4)
        seq = prompt
        for _ in range(4):  # greedy by hand over forward
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_an_id_beyond_the_table_is_refused():
    model = archspec.build_text(SPEC).eval()
    with pytest.raises(ValueError, match=r"token id 17 is outside the vocabulary of start_row \(0..16\)"):
        model.generate(torch.tensor([[17, 3]]), max_new_tokens=2)
