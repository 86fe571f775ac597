"""specs/gpt_neox.yaml against Hugging Face transformers' GPTNeoXForCausalLM and specs/bloom.yaml
against BloomForCausalLM, small configurations, in the manner of tests/test_parity_gptj_mistral.py
(and with the helpers of tests/test_parity_vocabulary.py): two decoder-only models first written
from the docs alone, in a user trial, then shipped.

GPT-NeoX (Pythia): each block's attention and MLP have LayerNorms of their own, and run in
parallel from the block's input (use_parallel_residual=True, the spec's `parallel: true`) or one
after the other (`parallel: false`: the MLP reads the attention's residual sum, a `from:` made by
an expression); rotary embeddings over the first rotary_pct = 1/4 of each head's dims, turning the
halves; query_key_value's rows grouped by head, regrouped by the mapping into archspec's [q; k; v].
BLOOM: ALiBi instead of positions, a LayerNorm on the embeddings, an output layer tied to them;
at 4 heads and at 6, a count that is not a power of two, whose slopes are not one geometric run.

The noise: 0.05 on every parameter as elsewhere, and 0.5 more on the fused query_key_value
projection, so that the attention is sharp: under near-uniform attention a wrong rotary width,
residual form or ALiBi slope moves the logits little. The tests that the checks can fail build
the spec with the other residual form, another rotary_pct, no ALiBi or wrong slopes, from the same
weights. Logits and the next-token loss agree within 1e-5 (relative where the logits exceed 1) at
24 tokens and at 5; greedy generation through archspec's KV cache gives Hugging Face's tokens;
FLOPs agree with FlopCounterMode at the longest length.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

import archspec

from .conftest import ROOT, scratch
from .test_parity_vocabulary import FLOPS_REL, TOL, close, count_flops, ids, param_count, perturb_everything

pytest.importorskip("transformers")

VOCAB = 1000
LENGTHS = (24, 5)
SHARP = 0.5  # extra noise on the fused query/key/value projection


def gpt_neox(parallel: bool):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                           rotary_pct=0.25, vocab_size=VOCAB, max_position_embeddings=128,
                           use_parallel_residual=parallel, bos_token_id=0, eos_token_id=0)
    return GPTNeoXForCausalLM._from_config(config, attn_implementation="eager")


def bloom(dim: int, heads: int):
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(hidden_size=dim, n_layer=2, n_head=heads, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
    return BloomForCausalLM._from_config(config, attn_implementation="eager")


# case -> (spec, reference, the spec's overrides, its parameter count)
CASES = {
    "gpt_neox": ("gpt_neox", lambda: gpt_neox(parallel=True), None, 652_800),
    "gpt_neox_sequential": ("gpt_neox", lambda: gpt_neox(parallel=False), {"parallel": False}, 652_800),
    "bloom": ("bloom", lambda: bloom(128, 4), None, 525_056),
    "bloom_6_heads": ("bloom", lambda: bloom(96, 6), {"dim": 96, "heads": 6}, 320_064),
}


def sharpened(model):
    """Seeded noise on every parameter, and more on the query/key/value projection."""
    perturb_everything(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("query_key_value.weight"):
                p.add_(SHARP * torch.randn(p.shape, generator=generator))
    return model


class Pair:
    """The reference and ours, loaded from the reference's own state dict file."""

    def __init__(self, case: str, folder):
        torch.manual_seed(0)
        self.case = case
        self.spec, reference, self.overrides, self.params = CASES[case]
        self.ref = sharpened(reference().eval())
        self.weights = str(folder / f"{case}.pt")
        torch.save(self.ref.state_dict(), self.weights)
        self.path = str(ROOT / "specs" / f"{self.spec}.yaml")
        self.report = archspec.check(self.path, overrides=self.overrides)
        self.ours = self.build()

    def build(self, **overrides):
        return archspec.build(self.path, {**(self.overrides or {}), **overrides}, weights=self.weights).eval()


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, scratch(request, tmp_path_factory, "weights"))


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref) == pair.params


@pytest.mark.parametrize("length", LENGTHS)
def test_logits_and_loss_match(pair, length):
    input_ids = ids(2, length, VOCAB)
    with torch.no_grad():
        out = pair.ref(input_ids=input_ids, labels=input_ids)
        logits, loss = pair.ours(input_ids), pair.ours.loss(input_ids, input_ids)
    diffs = {"logits": close(out.logits, logits), "loss": close(out.loss, loss)}
    assert all(d < TOL for d in diffs.values()), diffs


def test_greedy_generation_gives_the_references_tokens(pair):
    """The KV cache path (rotary at each new position, ALiBi's distances over the cache) too."""
    prompt = ids(1, 6, VOCAB, seed=3)
    with torch.no_grad():
        theirs = pair.ref.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0, eos_token_id=None)
        ours = pair.ours.generate(prompt, max_new_tokens=20)
    assert ours.tolist() == theirs.tolist()


def alibi_modules(model):
    found = [m for m in model.modules() if isinstance(getattr(m, "slopes", None), torch.Tensor)]
    assert found
    return found


def geometric_slopes(heads: int) -> torch.Tensor:
    """2^(-8i/n), i = 1..n: ALiBi's slopes for n a power of two, wrong for any other n."""
    return torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])


def test_the_checks_can_fail(pair):
    """The same weights under the other residual form or half the heads' dims rotated (GPT-NeoX),
    with plain causal attention, no ALiBi, or (6 heads) the geometric slopes a power of two would
    have, 2^(-8i/6), in place of the paper's (BLOOM), give logits far past the tolerance."""
    if pair.spec == "gpt_neox":
        others = [pair.build(parallel=pair.case == "gpt_neox_sequential"), pair.build(rotary_pct=0.5)]
    else:
        text = (ROOT / "specs" / "bloom.yaml").read_text()
        assert "kind: alibi" in text
        others = [archspec.build_text(text.replace("kind: alibi", "kind: causal"), pair.overrides,
                                      weights=pair.weights).eval()]
        heads = pair.ref.config.n_head
        if not math.log2(heads).is_integer():
            others.append(pair.build())
            for module in alibi_modules(others[-1]):
                module.slopes.copy_(geometric_slopes(heads).view(heads, 1, 1))
    input_ids = ids(2, 24, VOCAB)
    with torch.no_grad():
        gaps = [close(pair.ours(input_ids), other(input_ids)) for other in others]
    assert all(gap > 100 * TOL for gap in gaps), gaps


@pytest.mark.parametrize("heads", [4, 6, 12, 16, 20])
def test_alibi_slopes_are_the_references(heads):
    """BLOOM's slopes are Hugging Face's build_alibi_tensor's, for every head count (6: 2^-2, 2^-4,
    2^-6, 2^-8, then 2^-1, 2^-3), the geometric run only for a power of two. To the last bit or
    so: Hugging Face raises a float32 base to integer powers (at 16 heads its second slope is
    0.49999997), archspec rounds the exact powers of two."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    theirs = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)[:, 0, 1]  # slope * distance 1
    model = archspec.build(ROOT / "specs" / "bloom.yaml", {"dim": 8 * heads, "heads": heads, "layers": 1})
    for module in alibi_modules(model):
        torch.testing.assert_close(module.slopes.flatten(), theirs, rtol=1e-6, atol=0)
    geometric = torch.allclose(geometric_slopes(heads), theirs, rtol=1e-6, atol=0)
    assert geometric == math.log2(heads).is_integer()


def test_other_checkpoint_forms_load_without_warnings(pair, tmp_path, caplog):
    """GPT-NeoX as the hub's Pythia checkpoints hold it (embed_out, the causal mask, masked_bias
    and inv_freq buffers); BLOOM as BloomModel (no `transformer.` prefix, no lm_head): the same
    logits, and the load warns of nothing."""
    state = pair.ref.state_dict()
    if pair.spec == "gpt_neox":
        state = {("embed_out.weight" if key == "lm_head.weight" else key): value for key, value in state.items()}
        for i in range(2):
            prefix = f"gpt_neox.layers.{i}.attention."
            state[prefix + "bias"] = torch.tril(torch.ones(128, 128, dtype=torch.bool)).view(1, 1, 128, 128)
            state[prefix + "masked_bias"] = torch.tensor(-1e9)
            state[prefix + "rotary_emb.inv_freq"] = 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8)
    else:
        state = pair.ref.transformer.state_dict()
    path = tmp_path / "other.pt"
    torch.save(state, path)
    with caplog.at_level(logging.WARNING, logger="archspec"):
        other = archspec.build(pair.path, pair.overrides, weights=str(path)).eval()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    input_ids = ids(2, 24, VOCAB)
    with torch.no_grad():
        assert close(pair.ours(input_ids), other(input_ids)) == 0


def test_flops_match_flop_counter(pair):
    length = pair.report.graph.dims["L"].hi
    measured = count_flops(lambda: pair.ref(input_ids=ids(1, length, VOCAB)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)
