"""A dropped learned tensor of the shape of a kept tensor the model ties, with other values: an
untied checkpoint's lm_head.weight into a spec whose head ties the embedding table. The ERNIE 4.5
and Cohere2 trials were told only "dropped 1 learned tensor: lm_head.weight" (logits 0.14-1.19
off); the warning now says what was lost and what a head of its own is."""

from __future__ import annotations

import pytest

import archspec
from archspec.compiler.weights.load import load_weights

from tests.conftest import ROOT

SPEC = str(ROOT / "specs" / "gpt2.yaml")
SMALL = {"vocab": 64, "dim": 32, "depth": 1, "heads": 2, "context": 16}


@pytest.mark.parametrize("tied", [False, True])
def test_an_untied_head_dropped_into_a_tied_spec_says_what_is_lost(tied):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16,
                                     tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0)
    reference = transformers.GPT2LMHeadModel(config)
    model = archspec.build(SPEC, SMALL, seed=0)
    warnings = load_weights(model, reference.state_dict(), archspec.check(SPEC, SMALL).graph).warnings
    if tied:
        assert warnings == []  # the dropped lm_head.weight is the table's copy: nothing lost
        return
    (said,) = warnings
    assert "dropped 1 learned tensor(s)" in said
    assert "lm_head.weight has the shape of the kept embed.tokens.weight, which the model ties" in said
    assert "`head: {kind: lm, vocab: ...}`" in said


def test_a_tied_table_given_two_values_says_to_untie_the_head():
    """The SmolLM3 trial's untied head under the tied name was told to "give one copy's tensors
    (e.g. layers.0.*) to share it, or build the spec without `share: true`": a repeat's advice."""
    model = archspec.build(SPEC, SMALL, seed=0)
    state = {key: value.clone() for key, value in model.state_dict().items()}
    state["head.table.weight"] = state["head.table.weight"] + 1.0
    with pytest.raises(archspec.SpecError) as error:
        load_weights(model, state, archspec.check(SPEC, SMALL).graph)
    diagnostic = error.value.diagnostics[0]
    assert "embed.tokens.weight and head.table.weight" in diagnostic.message
    assert "`vocab:` in place of `tie:`" in diagnostic.hint and "share: true" not in diagnostic.hint
