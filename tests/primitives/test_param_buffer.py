"""param with `learned: false`: a buffer (BART's final_logits_bias added to the logits), in the
state dict and loaded from a checkpoint, not trained, not counted; against transformers' BART."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """
archspec: 1
name: logits_bias
dims:
  L: [1, 8]
inputs:
  ids: {shape: [B, L], dtype: int64}
graph:
  - {id: embed, embed: {vocab: 20, dim: 8, pos: none}}
  - {id: head, head: {kind: lm, tie: embed}}
  - {id: final_logits_bias, param: {shape: [20], init: zeros, learned: false}}
  - {id: logits, from: [head, final_logits_bias], add: {}}
outputs: {logits: logits}
"""


def test_a_param_that_is_not_learned_is_a_loaded_buffer_not_counted():
    report = archspec.check_text(SPEC)
    model = archspec.build_text(SPEC)
    assert report.params == sum(p.numel() for p in model.parameters()) == 20 * 8  # the table alone
    assert "final_logits_bias.value" in model.state_dict()
    assert "final_logits_bias.value" not in dict(model.named_parameters())
    state = dict(model.state_dict())
    state["final_logits_bias.value"] = torch.arange(20.0)[None]  # [1, 20]
    loaded = archspec.build_text(SPEC, weights=state)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids) - model(ids), torch.arange(20.0).expand(1, 3, 20), atol=1e-5)


def test_bart_keeps_its_final_logits_bias_as_such_a_buffer():
    transformers = pytest.importorskip("transformers")
    config = transformers.BartConfig(vocab_size=20, d_model=8, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                                     decoder_ffn_dim=16, max_position_embeddings=16)
    bart = transformers.BartForConditionalGeneration(config)
    assert "final_logits_bias" in dict(bart.named_buffers())  # a buffer there too: not a parameter


FROZEN = SPEC.replace("init: zeros, learned: false", "init: zeros, frozen: true")


def test_a_frozen_param_is_counted_and_never_trains():
    """Hugging Face's PatchTST and Whisper keep their sinusoid tables as parameters without
    requires_grad: in parameters() (the total count), not among the trainable ones."""
    report = archspec.check_text(FROZEN)
    model = archspec.build_text(FROZEN)
    frozen = dict(model.named_parameters())["final_logits_bias.value"]
    assert not frozen.requires_grad and frozen.shape == (1, 20)
    assert report.params == sum(p.numel() for p in model.parameters()) == 20 * 8 + 20
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 20 * 8
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    assert frozen.grad is None and model.embed.tokens.weight.grad is not None
    learned = archspec.build_text(SPEC.replace("init: zeros, learned: false", "init: zeros"))
    assert dict(learned.named_parameters())["final_logits_bias.value"].requires_grad  # the check can fail


def test_frozen_with_learned_false_is_a_located_error():
    from archspec.core.errors import SpecError

    with pytest.raises(SpecError, match="`frozen` keeps a parameter from training, but `learned: false`"):
        archspec.check_text(SPEC.replace("learned: false", "learned: false, frozen: true"))
