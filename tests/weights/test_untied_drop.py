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


LM = """
name: lm
params: {tie: true}
inputs: {ids: {shape: [B, 8], dtype: int64}}
graph:
  - {id: embed, embed: {vocab: 64, dim: 32, pos: none}}
  - {id: norm, norm: {}}
  - {id: head, head: {kind: lm, vocab: "${None if tie else 64}", tie: "${'embed' if tie else None}"}}
"""


@pytest.mark.parametrize("equal", [True, False])
def test_a_head_weight_beside_a_tied_head_says_drop_or_untie(equal):
    """The StableLM trial's mapping kept a tied checkpoint's lm_head.weight and was told only
    '1 unexpected (head.fc.weight)': the hint says the head is tied, and to drop the copy (equal to
    the table) or untie the head (other values)."""
    model = archspec.build_text(LM, seed=0)
    state = dict(model.state_dict())
    state["head.fc.weight"] = state["embed.tokens.weight"].clone() + (0.0 if equal else 1.0)
    with pytest.raises(archspec.SpecError) as error:
        load_weights(model, state, archspec.check_text(LM).graph)
    hint = error.value.diagnostics[0].hint
    assert "the head 'head' is tied to embed.tokens.weight (`tie:`) and has no weight of its own" in hint
    assert ("drop it in the mapping" in hint) == equal and ("give the head `vocab:` in place of `tie:`" in hint) != equal


def test_an_untied_head_whose_tensor_the_mapping_dropped_is_told_to_map_it(tmp_path):
    """The Falcon trial's own mapping dropped lm_head.weight for an untied head and was told 'if the
    reference ties them, say `tie: embed`', which pointed the wrong way: the hint names the dropped
    tensor of the head's shape first."""
    untied = LM.replace("tie: true", "tie: false")
    model = archspec.build_text(untied, seed=0)
    state = {key: value for key, value in model.state_dict().items() if key != "head.fc.weight"}
    state["lm_head.weight"] = model.state_dict()["head.fc.weight"].clone()
    mapping = tmp_path / "drops.yaml"
    mapping.write_text("archspec: 1\nname: drops\nidentify: ['^lm_head\\.weight$']\n"
                       "rules:\n  - drop: ['^lm_head\\.weight$']\n")
    with pytest.raises(archspec.SpecError) as error:
        load_weights(model, state, archspec.check_text(untied).graph, [str(mapping)])
    hint = error.value.diagnostics[0].hint
    assert "head.fc.weight is missing, and the mapping dropped lm_head.weight, of its shape: map it to" in hint
