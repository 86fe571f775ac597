"""embed `pos_frozen: true`: the sinusoid table as a parameter that never trains, in the state
dict and counted, as Hugging Face's Pegasus (PegasusSinusoidalPositionalEmbedding, a frozen
nn.Embedding). The Pegasus trial's spec regenerated the table and its mapping dropped HF's: the
total count came out 4,096 short, and a spec without `sincos_layout: halves` loaded, ran and was
2.7 off without a word. Loaded, the checkpoint's table is the one used."""

from __future__ import annotations

import pytest
import torch

import archspec

pegasus = pytest.importorskip("transformers.models.pegasus.modeling_pegasus")

SPEC = """name: s
dims: {L: [1, 64]}
inputs: {ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: 10, dim: 32, pos: sincos, sincos_layout: halves, max_len: 64, pos_frozen: true}}
"""


def test_the_table_is_pegasuss_frozen_counted_and_loaded():
    hf = pegasus.PegasusSinusoidalPositionalEmbedding(64, 32)
    table = hf.create_weight()  # [64, 32]
    model = archspec.build_text(SPEC, seed=0)
    assert torch.allclose(model.embed.pos_table, table, atol=1e-6) and not model.embed.pos_table.requires_grad
    assert archspec.check_text(SPEC).params == 10 * 32 + 64 * 32 == sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 10 * 32
    interleaved = archspec.build_text(SPEC.replace("sincos_layout: halves, ", ""), seed=0)  # the trial's slip
    state = interleaved.state_dict()
    state["embed.pos_table"] = table  # the checkpoint's table loads into the table used
    interleaved.load_state_dict(state)
    ids = torch.randint(0, 10, (2, 7))
    assert torch.equal(interleaved(ids), model(ids))


def test_pos_frozen_goes_with_sinusoids():
    with pytest.raises(archspec.SpecError, match="pos_frozen freezes a sinusoid table, and these positions are learned"):
        archspec.check_text(SPEC.replace("pos: sincos, sincos_layout: halves, ", "pos: learned, "))
