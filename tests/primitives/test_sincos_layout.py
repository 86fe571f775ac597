"""embed's sincos_layout: Vaswani et al.'s interleaved sinusoids (sin at 2i, cos at 2i + 1), the
halves of Hugging Face's Marian (all the sines, then all the cosines) or fairseq's (the halves
at the frequencies 10000^(-i/(d/2 - 1)): tensor2tensor, fairseq, FSMT, Whisper). The Marian user
trial found only the first could be said: a Marian spec built silently with logits 2.56 off, and
was made exact only by permuting channels in the mapping. The Whisper trial found the docs named
fairseq and tensor2tensor for Marian's table, which differs from theirs by 0.35."""

from __future__ import annotations

import pytest
import torch

import archspec
from archspec.core.errors import SpecError

SPEC = """
archspec: 1
name: positions
params: {layout: halves}
dims: {L: [1, 32]}
inputs: {ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: 16, dim: 8, pos: sincos, max_len: 32, sincos_layout: "${layout}"}}
"""


def test_halves_are_hugging_faces_marian_table():
    pytest.importorskip("transformers")
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    theirs = MarianSinusoidalPositionalEmbedding(32, 8).create_weight()  # what its weight init fills in
    ours = archspec.build_text(SPEC).embed.pos_table
    assert torch.allclose(ours, theirs.float(), atol=1e-6)
    assert not torch.allclose(archspec.build_text(SPEC, {"layout": "interleaved"}).embed.pos_table, theirs, atol=1e-2)


@pytest.mark.parametrize("dim", [8, 64])
def test_fairseq_is_fsmts_and_whispers_table(dim):
    pytest.importorskip("transformers")
    from transformers.models.fsmt.modeling_fsmt import SinusoidalPositionalEmbedding
    from transformers.models.whisper.modeling_whisper import sinusoids

    text = SPEC.replace("dim: 8", f"dim: {dim}")
    ours = archspec.build_text(text, {"layout": "fairseq"}).embed.pos_table
    fsmt = SinusoidalPositionalEmbedding.get_embedding(32, dim, padding_idx=None)
    assert torch.allclose(ours, fsmt, atol=1e-5) and torch.allclose(ours, sinusoids(32, dim), atol=1e-5)
    marian = archspec.build_text(text).embed.pos_table
    assert (marian - ours).abs().max() > 0.05  # the frequencies differ: the check can fail


def test_interleaved_is_the_default_and_the_halves_reorder_its_columns():
    interleaved = archspec.build_text(SPEC, {"layout": "interleaved"}).embed.pos_table
    halves = archspec.build_text(SPEC).embed.pos_table
    assert torch.equal(halves, torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1))
    assert torch.equal(archspec.build_text(SPEC.replace(', sincos_layout: "${layout}"', "")).embed.pos_table,
                       interleaved)


def test_a_layout_for_learned_positions_is_a_located_error():
    with pytest.raises(SpecError, match="sincos_layout orders sinusoidal positions; these positions are learned"):
        archspec.check_text(SPEC.replace("pos: sincos", "pos: learned"))


NUMBERED = """
archspec: 1
name: numbered
dims: {L: [1, 32]}
inputs: {ids: {shape: [B, L], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: 40, dim: 16, pos: sincos, max_len: 32, sincos_layout: fairseq, pos_pad_id: 1,
                        pad_id: 1, scale: true}}
"""


def test_numbered_from_the_ids_as_m2m100s_positions():
    """fairseq's positions (M2M100, NLLB, FSMT): each real token at row pad + 1 + its count, the
    padding at the zero row pad, left-padded rows included (the new-words trial: FSMT stayed 1.68
    off while sincos positions could not be numbered). FSMT's table is the one above
    (test_fairseq_is_fsmts_and_whispers_table), numbered as M2M100's."""
    pytest.importorskip("transformers")
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding as M2M100

    ids = torch.tensor([[5, 6, 7, 8, 9], [1, 1, 5, 6, 7]])  # the second left-padded (pad 1)
    model = archspec.build_text(NUMBERED)
    tokens = model.embed.tokens.weight[ids] * 16 ** 0.5
    with torch.no_grad():
        ours = model(ids) - tokens
        m2m = M2M100(32, 16, padding_idx=1)(ids)
    assert torch.allclose(ours, m2m, atol=1e-5)
    unnumbered = archspec.build_text(NUMBERED.replace(" pos_pad_id: 1,", ""))
    with torch.no_grad():
        assert (unnumbered(ids) - unnumbered.embed.tokens.weight[ids] * 4 - m2m).abs().max() > 0.1  # can fail
