"""specs/gptj.yaml against Hugging Face transformers' GPTJForCausalLM and specs/mistral.yaml
against MistralForCausalLM, small configurations, in the manner of tests/test_parity_vocabulary.py
(whose helpers it uses): two decoder-only models first written from the docs alone, in a user
trial, then shipped.

GPT-J: blocks that run attention and the MLP in parallel from one shared LayerNorm (a block of a
`norm`, two sub-layers with `norm: none, residual: false` and an `add`), rotary embeddings over
the first 16 dims of each head turning the pairs (2i, 2i + 1) (`rope_interleaved`), an output
layer with a bias. Mistral: Llama with sliding-window causal attention (`kind: sliding`), loaded
through the shipped Llama mapping.

The noise: 0.05 on every parameter as elsewhere, and 0.5 more on the query and key projections,
so that the attention is sharp: under uniform attention a wrong rotary convention or window moves
the logits little (the user trial measured 0.049 against logits up to 1.4). The tests that the
checks can fail build the spec with the other convention, or another window, from the same
weights. Logits and the next-token loss agree within 1e-5 (relative where the logits exceed 1) at
24 tokens (past Mistral's window of 8) and at 5; greedy generation through archspec's KV cache
gives Hugging Face's tokens; FLOPs agree with FlopCounterMode at the longest length.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from .conftest import ROOT, scratch
from .test_parity_vocabulary import FLOPS_REL, TOL, close, count_flops, ids, param_count, perturb_everything

pytest.importorskip("transformers")

VOCAB = 1000
LENGTHS = (24, 5)
SHARP = 0.5  # extra noise on the query and key projections


def gptj():
    from transformers import GPTJConfig, GPTJForCausalLM

    config = GPTJConfig(n_embd=128, n_layer=2, n_head=4, rotary_dim=16, vocab_size=VOCAB, n_positions=128,
                        bos_token_id=0, eos_token_id=0)
    return GPTJForCausalLM._from_config(config, attn_implementation="eager")


def mistral():
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=VOCAB, sliding_window=8, max_position_embeddings=128,
                           bos_token_id=0, eos_token_id=0)
    return MistralForCausalLM._from_config(config, attn_implementation="eager")


REFERENCES = {"gptj": gptj, "mistral": mistral}


def sharpened(model):
    """Seeded noise on every parameter, and more on the query and key projections."""
    perturb_everything(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.add_(SHARP * torch.randn(p.shape, generator=generator))
    return model


class Pair:
    """The reference and ours, loaded from the reference's own state dict file."""

    def __init__(self, spec: str, folder):
        torch.manual_seed(0)
        self.spec = spec
        self.ref = sharpened(REFERENCES[spec]().eval())
        self.weights = str(folder / f"{spec}.pt")
        torch.save(self.ref.state_dict(), self.weights)
        self.path = str(ROOT / "specs" / f"{spec}.yaml")
        self.report = archspec.check(self.path)
        self.ours = archspec.build(self.path, weights=self.weights).eval()


@pytest.fixture(scope="module", params=list(REFERENCES))
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)
    assert pair.report.params == {"gptj": 652_264, "mistral": 551_552}[pair.spec]


@pytest.mark.parametrize("length", LENGTHS)
def test_logits_and_loss_match(pair, length):
    input_ids = ids(2, length, VOCAB)
    with torch.no_grad():
        out = pair.ref(input_ids=input_ids, labels=input_ids)
        logits, loss = pair.ours(input_ids), pair.ours.loss(input_ids, input_ids)
    diffs = {"logits": close(out.logits, logits), "loss": close(out.loss, loss)}
    assert all(d < TOL for d in diffs.values()), diffs


def test_greedy_generation_gives_the_references_tokens(pair):
    """The KV cache path (rotary at each new position, Mistral's window over the cache) too."""
    prompt = ids(1, 6, VOCAB, seed=3)
    with torch.no_grad():
        theirs = pair.ref.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0, eos_token_id=None)
        ours = pair.ours.generate(prompt, max_new_tokens=20)
    assert ours.tolist() == theirs.tolist()


def test_the_checks_can_fail(pair):
    """The same weights under the other rotary convention (GPT-J) or a window one shorter
    (Mistral) give logits far past the tolerance."""
    text = (ROOT / "specs" / f"{pair.spec}.yaml").read_text()
    edit = {"gptj": ("rope_interleaved: true", "rope_interleaved: false"),
            "mistral": ("window: 8 ", "window: 7 ")}[pair.spec]
    assert edit[0] in text
    other = archspec.build_text(text.replace(*edit), weights=pair.weights).eval()
    input_ids = ids(2, 24, VOCAB)
    with torch.no_grad():
        assert close(pair.ours(input_ids), other(input_ids)) > 100 * TOL


def test_flops_match_flop_counter(pair):
    length = pair.report.graph.dims["L"].hi
    measured = count_flops(lambda: pair.ref(input_ids=ids(1, length, VOCAB)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)
