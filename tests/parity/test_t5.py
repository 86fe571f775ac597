"""specs/t5_small.yaml against Hugging Face transformers' T5ForConditionalGeneration, in the
manner of tests/parity/test_vocabulary.py (whose helpers it uses).

The reference is T5ForConditionalGeneration(T5Config()) (t5-small) with eager attention and
random init; seeded noise goes on *every* parameter, its state dict is saved to a file, and
`archspec.build(spec, weights=FILE)` alone loads it (the spec names mappings/hf_t5.yaml). Then
the parameter counts agree (reference = module = checker), and the logits and the loss agree
within 1e-5 (relative where the logits exceed 1) with a padded attention_mask, at two pairs of
source and target lengths (the longer target runs past max_distance, where the causal buckets
saturate), and at a size changed with `--set`-style overrides (2 encoder and 3 decoder layers,
d_model 128, 4 heads of d_kv 16, so heads x d_kv != d_model, 16 buckets, max_distance 20).

The noise is 0.02, not perturb_everything's default 0.05: T5 does not scale q·k^T, and 0.05 on
its query and key weights (initialised at std 0.0055 and 0.044) makes the attention logits so
large that Hugging Face's own float32 logits lie 7e-4 from its float64 ones, far beyond any
tolerance two float32 implementations can meet (archspec's lie as close: the slow test
`test_as_close_to_float64_as_the_reference_at_the_default_noise` shows it). At 0.02 both lie
about 2e-6 from float64 and from each other; the noise still dwarfs the query init and makes
every tensor distinct.
"""

from __future__ import annotations

import copy

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, ids, param_count, perturb_everything

pytest.importorskip("transformers")

SPEC = str(ROOT / "specs" / "t5_small.yaml")
BATCH = 2
NOISE = 0.02  # see the module's docstring

# (spec overrides, T5Config arguments, (source, target) lengths compared) of each size
DEFAULT = ({}, {}, ((13, 9), (40, 150)))
RESIZED = ({"vocab": 1000, "dim": 128, "head_dim": 16, "heads": 4, "ffn": 256, "layers": 2, "decoder_layers": 3,
            "buckets": 16, "max_distance": 20},
           dict(vocab_size=1000, d_model=128, d_kv=16, num_heads=4, d_ff=256, num_layers=2, num_decoder_layers=3,
                relative_attention_num_buckets=16, relative_attention_max_distance=20),
           ((11, 7), (50, 45)))


def reference(config_args: dict):
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration._from_config(T5Config(**config_args), attn_implementation="eager").eval()


def padded_mask(length: int) -> torch.Tensor:
    """1 for tokens, 0 for padding: the second sequence ends in 4 pads, the first starts with 2."""
    mask = torch.ones(BATCH, length, dtype=torch.long)
    mask[1, length - 4:] = 0
    mask[0, :2] = 0
    return mask


class Pair:
    """Reference (noise on every parameter) and ours, loaded from the reference's own checkpoint file."""

    def __init__(self, overrides: dict, config_args: dict, lengths, folder, noise: float = NOISE):
        torch.manual_seed(0)
        self.overrides, self.lengths = overrides, lengths
        self.ref = perturb_everything(reference(config_args), scale=noise)
        self.vocab = self.ref.config.vocab_size
        path = folder / "t5.pt"
        torch.save(self.ref.state_dict(), path)
        self.report = archspec.check(SPEC, overrides)
        self.ours = archspec.build(SPEC, overrides, weights=str(path)).eval()

    def inputs(self, source: int, target: int):
        return ids(BATCH, source, self.vocab), padded_mask(source), ids(BATCH, target, self.vocab, seed=2)


@pytest.fixture(scope="module", params=[DEFAULT, RESIZED], ids=["default", "resized"])
def pair(request, tmp_path_factory) -> Pair:
    return Pair(*request.param, scratch(request, tmp_path_factory, "weights"))


def test_the_reference_config_is_as_the_spec_says():
    """The header's defaults: RMSNorm eps 1e-6, ReLU FFN, 32 buckets up to 128, a tied and
    rescaled output layer, no attention scaling."""
    from transformers import T5Config

    config = T5Config()
    assert config.layer_norm_epsilon == 1e-6 and config.feed_forward_proj == "relu" and not config.is_gated_act
    assert config.relative_attention_num_buckets == 32 and config.relative_attention_max_distance == 128
    assert config.tie_word_embeddings and config.scale_decoder_outputs
    assert (config.d_model, config.d_kv, config.num_heads, config.d_ff) == (512, 64, 8, 2048)
    assert reference({"num_layers": 1, "num_decoder_layers": 1}).encoder.block[0].layer[0].SelfAttention.scaling == 1.0


def test_parameter_count(pair):
    assert pair.ref.lm_head.weight is pair.ref.shared.weight  # tied, counted once
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


def test_the_default_size_has_the_headers_parameter_count():
    assert archspec.check(SPEC).params == 60_506_624


def test_t5_tiny_is_the_resized_t5_small():
    """specs/t5_tiny.yaml (the small sibling the pipeline tests run) is the size compared here."""
    tiny = archspec.check(str(ROOT / "specs" / "t5_tiny.yaml"))
    resized = archspec.check(SPEC, RESIZED[0])
    assert tiny.params == resized.params == 719_872 and tiny.flops == resized.flops
    assert {k: tiny.graph.params[k] for k in RESIZED[0]} == RESIZED[0]


def logits_and_loss_gaps(pair, source: int, target: int, start: int) -> dict[str, float]:
    """How far ours lies from the reference (`close`) in the logits and in the loss, with a padded
    source; the decoder reads the labels one late, after `start` (shared with test_parity_bart.py)."""
    input_ids, attention_mask, decoder_input_ids = pair.inputs(source, target)
    labels = ids(BATCH, target, pair.vocab, seed=3)
    shifted = torch.cat([torch.full((BATCH, 1), start), labels[:, :-1]], dim=1)  # [B, T]
    with torch.no_grad():
        logits = pair.ref(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids).logits
        out = pair.ref(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=shifted, labels=labels)
        ours = pair.ours(input_ids, attention_mask, decoder_input_ids)
        loss = pair.ours.loss(input_ids, attention_mask, shifted, labels)
    return {"logits": close(logits, ours), "loss": close(out.loss, loss)}


def padding_mask_gap(pair, source: int, target: int) -> float:
    """How far ours moves when the padded keys are not masked (shared with test_parity_bart.py)."""
    input_ids, attention_mask, decoder_input_ids = pair.inputs(source, target)
    with torch.no_grad():
        masked = pair.ours(input_ids, attention_mask, decoder_input_ids)
        unmasked = pair.ours(input_ids, torch.ones_like(attention_mask), decoder_input_ids)
    return close(masked, unmasked)


@pytest.mark.parametrize("which", [0, 1], ids=["short", "long"])
def test_logits_and_loss_match(pair, which):
    # T5's decoder starts at token 0 (t5-small's decoder_start_token_id; T5Config() leaves it unset)
    diffs = logits_and_loss_gaps(pair, *pair.lengths[which], start=0)
    assert all(d < TOL for d in diffs.values()), diffs  # all(): a NaN fails, where max() would hide it


def test_the_padding_mask_matters_here(pair):
    """Padded keys change the logits well beyond the tolerance: a mask ignored in the encoder
    or in the cross-attention would show."""
    assert padding_mask_gap(pair, *pair.lengths[0]) > 1000 * TOL


def test_flops_match_flop_counter():
    """At a 64-token source and target (the checker costs the longest lengths the dims allow)."""
    length = 64
    report = archspec.check(SPEC, {"context": length})
    assert report.graph.dims["S"].hi == report.graph.dims["T"].hi == length
    ref = reference({})
    measured = count_flops(lambda: ref(input_ids=ids(1, length, 32128), decoder_input_ids=ids(1, length, 32128)))
    assert report.flops == pytest.approx(measured, rel=FLOPS_REL), (report.flops, measured)


@pytest.mark.slow
def test_as_close_to_float64_as_the_reference_at_the_default_noise(tmp_path):
    """With perturb_everything's default noise (0.05) the reference's own float32 logits stray
    from its float64 ones far beyond 1e-5; archspec's float32 logits stray no further."""
    overrides, config_args, lengths = DEFAULT
    p = Pair(overrides, config_args, lengths, tmp_path, noise=0.05)
    args = p.inputs(*lengths[1])
    with torch.no_grad():
        ref32 = p.ref(input_ids=args[0], attention_mask=args[1], decoder_input_ids=args[2]).logits
        ref64 = copy.deepcopy(p.ref).double()(input_ids=args[0], attention_mask=args[1],
                                              decoder_input_ids=args[2]).logits
        ours = p.ours(*args)
    reference_error, our_error = close(ref64, ref32), close(ref64, ours)
    print(f"t5 logits at noise 0.05: |HF fp32 - HF fp64| {reference_error:.2e}, |archspec - HF fp64| "
          f"{our_error:.2e}, |archspec - HF fp32| {close(ref32, ours):.2e}")
    assert reference_error > 10 * TOL
    assert our_error < 2 * reference_error
