"""specs/bart.yaml against Hugging Face transformers' BartForConditionalGeneration, a small
configuration, in the manner of tests/parity/test_t5.py and tests/parity/test_decoder_lm.py (with
the helpers of tests/parity/test_vocabulary.py): an encoder-decoder first written from the docs
alone, in a user trial, then shipped.

BART: learned positions read at the position plus 2 (the embed's `pos_offset: 2`, so that
embed_positions, max_position_embeddings + 2 rows, loads as it is), counted 0, 1, 2, ... whatever
the padding; a LayerNorm on each stack's embeddings; post-norm layers; the padding mask on the
encoder's self-attention and the decoder's cross-attention; one token table for the encoder, the
decoder and the output layer, whose logits get final_logits_bias added (a buffer: the spec's
`param` with `learned: false`, read by an `add`, which `generate` decodes).

The noise: 0.05 on every parameter as elsewhere, 0.5 more on both position tables, 0.2 more on the
query and key projections (sharper attention), and 0.1 on final_logits_bias (zeros in a fresh
model). With the positions this strong the decoder's output depends on where it is, and greedy
decoding gives a different token nearly every step; with 0.05 alone the residual carries the last
token on and greedy repeats one token (or, with a noisier bias, the bias's largest entries), which
would hide a wrong position or cache. Not 0.5 on the queries and keys, as for the decoder-only
models: BART scales q·k^T, but at 0.5 its attention logits at 128 tokens are so large that Hugging
Face's own float32 logits lie 5.7e-5 from its float64 ones (archspec's 6.2e-5, 2.7e-5 from Hugging
Face's), beyond what two float32 implementations can meet; at 0.2 all three lie within 1.5e-6.
The tests that the checks can fail build the spec, from the same weights, with the positions read
two rows early (pos_offset 0 over the same table), without the final_logits_bias add, and with
the embeddings scaled; and generate without the bias, and the padded sources without their mask.
Logits and the loss agree within 1e-5 (relative where the logits exceed 1) with a padded
attention_mask (one source padded at the start, one at the end) at 13 -> 9 tokens and at the
longest, 128 -> 128; greedy generation through archspec's caches gives Hugging Face's `generate`'s
tokens on the padded batch; FLOPs agree with FlopCounterMode at the longest lengths.
The comparison of logits and loss and the padding-mask check are test_parity_t5.py's; that the
mapping's `identify` claims BART's checkpoints alone is tests/weights/test_mapping_identify.py's.
"""

from __future__ import annotations

import logging

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_t5 import logits_and_loss_gaps, padded_mask, padding_mask_gap
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, ids, param_count, perturb_everything

pytest.importorskip("transformers")

SPEC = ROOT / "specs" / "bart.yaml"
VOCAB = 1000
CONTEXT = 128
BATCH = 2
LENGTHS = ((13, 9), (CONTEXT, CONTEXT))  # (source, target)
POSITIONS = 0.5  # extra noise on the position tables
SHARP = 0.2  # extra noise on the query and key projections (see the module's docstring)
BIAS = 0.1  # noise on final_logits_bias
START, PAD = 2, 1  # BartConfig's decoder_start_token_id and pad_token_id
NEW = 20
SMALL = dict(vocab_size=VOCAB, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=CONTEXT)
# the header's --set values and the Hugging Face configurations they are
BART_BASE = ({"vocab": 50265, "dim": 768, "heads": 12, "ffn": 3072, "layers": 6, "decoder_layers": 6, "context": 1024},
             dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                  decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072), 139_420_416)
BART_LARGE = ({"vocab": 50265, "dim": 1024, "heads": 16, "ffn": 4096, "layers": 12, "decoder_layers": 12,
               "context": 1024}, {}, 406_291_456)


def reference(**config_args):
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration._from_config(BartConfig(**{**SMALL, **config_args}),
                                                     attn_implementation="eager")


def sharpened(model):
    """Seeded noise on every parameter; more on the position tables and the query and key
    projections; some on final_logits_bias (a buffer, which perturb_everything leaves at zeros)."""
    perturb_everything(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.add_(SHARP * torch.randn(p.shape, generator=generator))
            elif name.endswith("embed_positions.weight"):
                p.add_(POSITIONS * torch.randn(p.shape, generator=generator))
        model.final_logits_bias.add_(BIAS * torch.randn(model.final_logits_bias.shape, generator=generator))
    return model


class Pair:
    """The reference and ours, loaded from the reference's own state dict file."""

    def __init__(self, folder):
        torch.manual_seed(0)
        self.ref = sharpened(reference().eval())
        self.vocab = VOCAB
        self.weights = str(folder / "bart.pt")
        torch.save(self.ref.state_dict(), self.weights)
        self.report = archspec.check(str(SPEC))
        self.ours = self.build()

    def build(self, **overrides):
        return archspec.build(str(SPEC), overrides, weights=self.weights).eval()

    def build_text(self, *edits: tuple[str, str, int], **overrides):
        """The spec with each (old, new, count) edit made (old found count times), these weights."""
        text = SPEC.read_text()
        for old, new, count in edits:
            assert text.count(old) == count, old
            text = text.replace(old, new)
        return archspec.build_text(text, overrides, weights=self.weights).eval()

    def inputs(self, source: int, target: int):
        return ids(BATCH, source, VOCAB), padded_mask(source), ids(BATCH, target, VOCAB, seed=2)

    def reference_generate(self) -> torch.Tensor:
        """Hugging Face's greedy tokens for the padded sources (made once)."""
        if getattr(self, "generated", None) is None:
            source, mask = ids(BATCH, 11, VOCAB, seed=4), padded_mask(11)
            with torch.no_grad():
                self.generated = self.ref.generate(source, attention_mask=mask, max_new_tokens=NEW, do_sample=False,
                                                   num_beams=1, decoder_start_token_id=START, pad_token_id=PAD,
                                                   eos_token_id=None, forced_bos_token_id=None,
                                                   forced_eos_token_id=None, no_repeat_ngram_size=0)
        return self.generated


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory) -> Pair:
    return Pair(scratch(request, tmp_path_factory, "weights"))


def test_the_reference_config_is_as_the_spec_says():
    """The spec's defaults are BartConfig's: exact GELU, no embedding scale, eps 1e-5, BartConfig's
    dropouts, a tied output layer, final_logits_bias a buffer; and the header's --set values give
    bart-base's and BartConfig()'s (bart-large's) parameter counts."""
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig()
    assert config.activation_function == "gelu" and not config.scale_embedding and config.tie_word_embeddings
    assert (config.dropout, config.attention_dropout, config.activation_dropout) == (0.1, 0.0, 0.0)
    assert (config.decoder_start_token_id, config.pad_token_id) == (START, PAD)
    params = archspec.check(str(SPEC)).graph.params
    assert (params["dropout"], params["attention_dropout"], params["activation_dropout"]) == (0.1, 0.0, 0.0)
    assert params["eps"] == 1e-5 and params["scale_embedding"] is False
    for overrides, config_args, count in (BART_BASE, BART_LARGE):
        with torch.device("meta"):
            ref = BartForConditionalGeneration(BartConfig(**config_args))
        assert "final_logits_bias" in dict(ref.named_buffers())
        assert param_count(ref) == archspec.check(str(SPEC), overrides).params == count


def test_parameter_count(pair):
    assert pair.ref.lm_head.weight is pair.ref.model.shared.weight  # tied, counted once
    assert "final_logits_bias.value" in dict(pair.ours.named_buffers())  # a buffer, as Hugging Face's
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref) == 1_087_488


@pytest.mark.parametrize("lengths", LENGTHS, ids=["short", "longest"])
def test_logits_and_loss_match(pair, lengths):
    diffs = logits_and_loss_gaps(pair, *lengths, start=START)
    assert all(d < TOL for d in diffs.values()), diffs  # all(): a NaN fails, where max() would hide it


def test_the_padding_mask_matters_here(pair):
    """Padded keys change the logits well beyond the tolerance: a mask ignored in the encoder
    or in the cross-attention would show."""
    assert padding_mask_gap(pair, *LENGTHS[0]) > 1000 * TOL


def test_greedy_generation_gives_the_references_tokens(pair):
    """The caches (each new target position's row, the source's keys and values kept, the
    source's mask in the cross-attention) and the final_logits_bias decoded with the logits, on
    sources padded at the start and at the end: Hugging Face's generate's tokens, and not one
    token repeated."""
    source, mask = ids(BATCH, 11, VOCAB, seed=4), padded_mask(11)
    with torch.no_grad():
        ours = pair.ours.generate(source, attention_mask=mask, max_new_tokens=NEW, decoder_start_token_id=START)
    theirs = pair.reference_generate()
    assert ours.shape == (BATCH, 1 + NEW)
    assert ours.tolist() == theirs.tolist()
    assert all(len(set(row)) > NEW // 2 for row in theirs[:, 1:].tolist()), theirs.tolist()


def test_the_checks_can_fail(pair):
    """The same weights with the positions read two rows early (pos_offset 0 over the same table
    of context + 2 rows), without final_logits_bias, or with the embeddings scaled by sqrt(d_model)
    give logits far past the tolerance; generation without the bias, or of the padded sources
    without their mask, gives other tokens."""
    no_bias = pair.build_text(("outputs: {logits: logits}", "outputs: {logits: head}", 1),
                              ("from: [logits, labels]", "from: [head, labels]", 1))
    others = [pair.build_text(("pos_offset: 2", "pos_offset: 0", 2), context=CONTEXT + 2), no_bias,
              pair.build(scale_embedding=True)]
    input_ids, attention_mask, decoder_input_ids = pair.inputs(*LENGTHS[0])
    with torch.no_grad():
        ours = pair.ours(input_ids, attention_mask, decoder_input_ids)
        gaps = [close(ours, other(input_ids, attention_mask, decoder_input_ids)) for other in others]
    assert all(gap > 100 * TOL for gap in gaps), gaps

    source, mask = ids(BATCH, 11, VOCAB, seed=4), padded_mask(11)
    theirs = pair.reference_generate()
    with torch.no_grad():
        unmasked = pair.ours.generate(source, max_new_tokens=NEW, decoder_start_token_id=START)
        unbiased = no_bias.generate(source, attention_mask=mask, max_new_tokens=NEW, decoder_start_token_id=START)
    assert all(unmasked[row].tolist() != theirs[row].tolist() for row in range(BATCH))
    assert all(unbiased[row].tolist() != theirs[row].tolist() for row in range(BATCH))


def test_other_checkpoint_forms_load_without_warnings(pair, tmp_path, caplog):
    """BartForConditionalGeneration's checkpoint warns of nothing; BartModel's (no `model.`
    prefix, no lm_head, no final_logits_bias) neither, its bias made zeros: the logits less the
    bias."""
    with caplog.at_level(logging.WARNING, logger="archspec"):
        pair.build()
        path = tmp_path / "bart_model.pt"
        state = pair.ref.model.state_dict()
        assert all(key.split(".")[0] in ("shared", "encoder", "decoder") for key in state)
        torch.save(state, path)
        other = archspec.build(str(SPEC), weights=str(path)).eval()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not other.state_dict()["final_logits_bias.value"].any()
    args = pair.inputs(*LENGTHS[0])
    with torch.no_grad():
        expected = pair.ours(*args) - pair.ref.final_logits_bias
        assert close(expected, other(*args)) < TOL


def test_flops_match_flop_counter(pair):
    """At the longest source and target (the checker costs the longest lengths the dims allow)."""
    assert pair.report.graph.dims["S"].hi == pair.report.graph.dims["T"].hi == CONTEXT
    measured = count_flops(lambda: pair.ref(input_ids=ids(1, CONTEXT, VOCAB), decoder_input_ids=ids(1, CONTEXT, VOCAB)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("beams", [1, 3])
def test_forced_bos_and_eos_tokens_as_hugging_face(pair, beams):
    """BART's and Marian's configs set forced_eos_token_id (bart-large-cnn's forced_bos_token_id
    too): the first new token is bos and the last the length allows is eos, greedy and in beam
    search; the tokens equal Hugging Face's and differ from a run without the forcing."""
    source, mask = ids(BATCH, 11, VOCAB, seed=4), padded_mask(11)
    forced = dict(forced_bos_token_id=0, forced_eos_token_id=2)
    with torch.no_grad():
        theirs = pair.ref.generate(source, attention_mask=mask, max_new_tokens=NEW, do_sample=False, num_beams=beams,
                                   decoder_start_token_id=START, pad_token_id=PAD, eos_token_id=2,
                                   no_repeat_ngram_size=0, **forced)
        ours = pair.ours.generate(source, attention_mask=mask, max_new_tokens=NEW, decoder_start_token_id=START,
                                  pad_token_id=PAD, eos_token_id=2, num_beams=beams, **forced)
        plain = pair.ours.generate(source, attention_mask=mask, max_new_tokens=NEW, decoder_start_token_id=START,
                                   pad_token_id=PAD, eos_token_id=2, num_beams=beams)
    assert ours.tolist() == theirs.tolist()
    assert ours[:, 1].tolist() == [0] * BATCH and ours[:, -1].tolist() == [2] * BATCH
    assert ours.tolist() != plain.tolist()


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("with_start", [True, False])
def test_a_target_prompt_as_hugging_face(pair, beams, with_start):
    """decoder_input_ids: the target's first ids, decoded on from (Whisper's forced prefix, a
    prompted translation; the Mllama trial could not continue a prompt over its memory). Without
    the start token in front, Hugging Face puts it there."""
    source, mask = ids(BATCH, 11, VOCAB, seed=4), padded_mask(11)
    prompt = ids(BATCH, 3, VOCAB, seed=9).clamp(min=3)  # no row begins with the start token (2)
    if with_start:
        prompt = torch.cat([torch.full((BATCH, 1), START), prompt], dim=1)
    with torch.no_grad():
        theirs = pair.ref.generate(source, attention_mask=mask, decoder_input_ids=prompt, max_new_tokens=NEW,
                                   do_sample=False, num_beams=beams, decoder_start_token_id=START, pad_token_id=PAD,
                                   eos_token_id=None, forced_bos_token_id=None, forced_eos_token_id=None,
                                   no_repeat_ngram_size=0)
        ours = pair.ours.generate(source, attention_mask=mask, decoder_input_ids=prompt, max_new_tokens=NEW,
                                  decoder_start_token_id=START, num_beams=beams)
    assert ours.tolist() == theirs.tolist()
    assert ours.shape[1] == 4 + NEW and ours[:, 0].tolist() == [START] * BATCH
