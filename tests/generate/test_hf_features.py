"""generate() as Hugging Face's beyond greedy and sampling (compiler/generate/search.py,
processors.py, beam.py, tokenizer.py): repetition_penalty, no_repeat_ngram_size, min_new_tokens,
stopping criteria and stop strings, return_dict_in_generate with scores, beam search, an
explicit signature, and text in and out through a tokenizer.

Each is compared token for token with Hugging Face's generate on the small GPT-2 and Llama of
test_generate.py (the same weights, every parameter perturbed by seeded noise).
"""

from __future__ import annotations

import inspect

import pytest
import torch

import archspec
from archspec.compiler.generate import GenerateOutput, generate

from tests.conftest import ROOT
from tests.generate.test_generate import GPT2_SETS, GPT2_SMALL, VOCAB, cli, left_padded, one_thread, pair, prompt

__all__ = ["one_thread", "pair"]  # the fixtures, shared with test_generate.py

NEW = 16


def hf(ref, ids, mask=None, **kwargs):
    with torch.no_grad():
        return ref.generate(ids, attention_mask=mask if mask is not None else torch.ones_like(ids),
                            max_new_tokens=NEW, do_sample=False, pad_token_id=0, **kwargs)


def test_repetition_penalty_equals_hugging_face_on_a_left_padded_batch(pair):
    ref, ours = pair
    ids, mask = left_padded()
    plain = generate(ours, ids, max_new_tokens=NEW, attention_mask=mask)
    out = generate(ours, ids, max_new_tokens=NEW, attention_mask=mask, repetition_penalty=1.8)
    assert torch.equal(out, hf(ref, ids, mask, repetition_penalty=1.8))
    assert not torch.equal(out, plain)  # the penalty changed the tokens


def test_no_repeat_ngram_size_equals_hugging_face(pair):
    ref, ours = pair
    ids = prompt(2, 6, seed=4)
    plain = generate(ours, ids, max_new_tokens=NEW)
    out = generate(ours, ids, max_new_tokens=NEW, no_repeat_ngram_size=2)
    assert torch.equal(out, hf(ref, ids, no_repeat_ngram_size=2))
    assert not torch.equal(out, plain)
    for row in out.tolist():  # no bigram twice
        grams = list(zip(row, row[1:]))
        assert len(grams) == len(set(grams))


def test_min_new_tokens_holds_eos_back_as_hugging_face(pair):
    ref, ours = pair
    ids = prompt(1, 5, seed=5)
    greedy = generate(ours, ids, max_new_tokens=NEW)
    eos = int(greedy[0, ids.shape[1]])  # the first new token
    early = generate(ours, ids, max_new_tokens=NEW, eos_token_id=eos)
    out = generate(ours, ids, max_new_tokens=NEW, eos_token_id=eos, min_new_tokens=6)
    assert torch.equal(out, hf(ref, ids, eos_token_id=eos, min_new_tokens=6))
    assert early.shape[1] == ids.shape[1] + 1 and out.shape[1] > ids.shape[1] + 6


def test_beam_search_equals_hugging_face(pair):
    ref, ours = pair
    ids = prompt(2, 6, seed=6)
    out = generate(ours, ids, max_new_tokens=NEW, num_beams=3)
    assert torch.equal(out, hf(ref, ids, num_beams=3))
    assert not torch.equal(out, generate(ours, ids, max_new_tokens=NEW))  # not the greedy tokens


def test_beam_search_with_eos_length_penalty_and_early_stopping_equals_hugging_face(pair):
    ref, ours = pair
    ids = prompt(2, 6, seed=6)
    beams = generate(ours, ids, max_new_tokens=NEW, num_beams=3)
    eos = int(beams[0, ids.shape[1] + 3])
    for extra in ({}, {"length_penalty": 0.5, "early_stopping": True}, {"early_stopping": "never"},
                  {"repetition_penalty": 1.5, "no_repeat_ngram_size": 3}):
        ours_out = generate(ours, ids, max_new_tokens=NEW, num_beams=3, eos_token_id=eos, pad_token_id=0, **extra)
        assert torch.equal(ours_out, hf(ref, ids, num_beams=3, eos_token_id=eos, **extra)), extra


def test_scores_and_the_output_object_equal_hugging_faces(pair):
    ref, ours = pair
    ids = prompt(1, 5, seed=7)
    out = generate(ours, ids, max_new_tokens=6, repetition_penalty=1.3, return_dict_in_generate=True,
                   output_scores=True)
    with torch.no_grad():
        theirs = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, pad_token_id=0,
                              repetition_penalty=1.3, return_dict_in_generate=True, output_scores=True)
    assert isinstance(out, GenerateOutput) and torch.equal(out.sequences, theirs.sequences)
    assert torch.equal(out["sequences"], out.sequences) and len(out.scores) == len(theirs.scores) == 6
    for a, b in zip(out.scores, theirs.scores):
        assert torch.allclose(a, b, atol=1e-4)
    beams = generate(ours, ids, max_new_tokens=6, num_beams=3, return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        theirs = ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, pad_token_id=0,
                              num_beams=3, return_dict_in_generate=True, output_scores=True)
    assert torch.equal(beams.sequences, theirs.sequences)
    assert torch.allclose(beams.sequences_scores, theirs.sequences_scores, atol=1e-4)


def test_stopping_criteria_are_hugging_faces_callables(pair):
    from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteria, StoppingCriteriaList

    ref, ours = pair
    ids = prompt(2, 5, seed=8)

    class SeenToken(StoppingCriteria):  # stops a sequence once it made token `token`
        def __init__(self, token):
            self.token = token

        def __call__(self, input_ids, scores, **kwargs):
            return input_ids[:, -1] == self.token

    greedy = generate(ours, ids, max_new_tokens=NEW)
    token = int(greedy[1, ids.shape[1] + 2])
    criteria = StoppingCriteriaList([SeenToken(token)])
    out = generate(ours, ids, max_new_tokens=NEW, stopping_criteria=criteria)
    assert torch.equal(out, hf(ref, ids, stopping_criteria=criteria))
    everyone = StoppingCriteriaList([lambda input_ids, scores: bool((input_ids[:, -1] == token).any())])
    out = generate(ours, ids, max_new_tokens=NEW, stopping_criteria=everyone)  # one bool for all: all stop
    assert torch.equal(out, hf(ref, ids, stopping_criteria=everyone)) and out.shape[1] <= ids.shape[1] + 3
    short = generate(ours, ids, max_new_tokens=NEW, stopping_criteria=[MaxLengthCriteria(ids.shape[1] + 3)])
    assert short.shape[1] == ids.shape[1] + 3


def word_tokenizer(path):
    """A tokenizer.json of whole words w0 .. w{VOCAB-1} (the tokenizers package, no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    tokenizer.save(str(path))
    return path


def test_stop_strings_read_the_text_through_the_tokenizer(pair, tmp_path):
    _, ours = pair
    ids = prompt(1, 4, seed=9)
    tokenizer = word_tokenizer(tmp_path / "tokenizer.json")
    greedy = generate(ours, ids, max_new_tokens=NEW, no_repeat_ngram_size=1)
    stop = f"w{int(greedy[0, ids.shape[1] + 3])}"
    out = generate(ours, ids, max_new_tokens=NEW, no_repeat_ngram_size=1, stop_strings=stop, tokenizer=str(tokenizer))
    assert torch.equal(out, greedy[:, :ids.shape[1] + 4])
    with pytest.raises(ValueError, match="stop_strings needs a tokenizer"):
        generate(ours, ids, stop_strings=stop)
    from transformers import PreTrainedTokenizerFast  # a Hugging Face tokenizer object goes too

    hf_tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer))
    again = generate(ours, ids, max_new_tokens=NEW, no_repeat_ngram_size=1, stop_strings=[stop], tokenizer=hf_tokenizer)
    assert torch.equal(again, out)


def test_the_signature_is_explicit_and_wrong_arguments_are_refused_in_words(pair):
    _, ours = pair
    parameters = inspect.signature(ours.generate).parameters
    assert not any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    assert {"num_beams", "repetition_penalty", "stopping_criteria", "return_dict_in_generate"} <= set(parameters)
    ids = prompt(1, 4, seed=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ours.generate(ids, num_beam=3)
    for kwargs, kind, words in (({"num_beams": 0}, ValueError, "num_beams must be 1 or more"),
                                ({"repetition_penalty": -1.0}, ValueError, "repetition_penalty must be"),
                                ({"stopping_criteria": lambda i, s: True}, TypeError, "a list of callables"),
                                ({"num_beams": 2, "streamer": _Streamer()}, ValueError, "streamer goes with"),
                                ({"early_stopping": "sometimes"}, ValueError, "early_stopping must be")):
        with pytest.raises(kind, match=words):
            ours.generate(ids, **kwargs)


class _Streamer:
    def put(self, tokens):
        pass

    def end(self):
        pass


def test_the_cli_takes_a_prompt_as_text_and_prints_text(capsys, tmp_path):
    tokenizer = word_tokenizer(tmp_path / "tokenizer.json")
    code, out, err = cli(capsys, "gpt2", *GPT2_SETS, "--tokenizer", str(tokenizer), "--prompt", "w5 w6 w7",
                         "--max-new-tokens", "6", "--repetition-penalty", "1.5")
    assert code == 0, err
    model = archspec.build(str(ROOT / "specs" / "gpt2.yaml"), GPT2_SMALL, seed=0).eval()
    ids = generate(model, torch.tensor([[5, 6, 7]]), max_new_tokens=6, repetition_penalty=1.5)
    assert out.strip() == " ".join(f"w{i}" for i in ids[0, 3:].tolist())
    code, out, err = cli(capsys, "gpt2", *GPT2_SETS, "--tokenizer", str(tokenizer), "--prompt", "w5 w6 w7",
                         "--max-new-tokens", "6", "--num-beams", "3")
    beams = generate(model, torch.tensor([[5, 6, 7]]), max_new_tokens=6, num_beams=3)
    assert code == 0 and out.strip() == " ".join(f"w{i}" for i in beams[0, 3:].tolist())
    code, _, err = cli(capsys, "gpt2", *GPT2_SETS, "--prompt", "w5")
    assert code == 2 and "--prompt needs --tokenizer" in err


def test_beam_search_and_a_penalty_on_t5_equal_hugging_face_on_a_padded_source(tmp_path):
    from tests.parity.test_t5 import RESIZED, Pair, padded_mask

    overrides, config, lengths = RESIZED  # with as many decoder layers as encoder layers: Hugging Face's cache
    t5 = Pair({**overrides, "decoder_layers": 2}, {**config, "num_decoder_layers": 2}, lengths, tmp_path)  # needs it
    source = prompt(2, 9, seed=10) % t5.vocab
    mask = padded_mask(9)
    for kwargs in ({"num_beams": 3}, {"repetition_penalty": 1.5, "no_repeat_ngram_size": 2}):
        ours = generate(t5.ours, source, attention_mask=mask, max_new_tokens=8, decoder_start_token_id=0, **kwargs)
        with torch.no_grad():
            theirs = t5.ref.generate(source, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                     decoder_start_token_id=0, eos_token_id=None, pad_token_id=0, **kwargs)
        assert torch.equal(ours, theirs), kwargs
