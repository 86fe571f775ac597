"""The shipped decoder-only language models against Hugging Face transformers, small
configurations, with the helpers of tests/parity/test_vocabulary.py: specs/gptj.yaml
(GPTJForCausalLM), mistral.yaml (MistralForCausalLM), gpt_neox.yaml (GPTNeoXForCausalLM, both
residual forms), bloom.yaml (BloomForCausalLM, at 4 heads and at 6), opt.yaml (OPTForCausalLM) and
phi.yaml (PhiForCausalLM, at two rotary fractions). Each was first written from the docs alone,
in a user trial, then shipped. One table, CASES, says what differs between them; every test runs
over it.

What each case exercises:
- GPT-J: attention and the MLP in parallel from one shared LayerNorm (a block of a `norm`, two
  sub-layers with `norm: none, residual: false` and an `add`), rotary embeddings over the first
  16 dims of each head turning the pairs (2i, 2i + 1) (`rope_interleaved`), an output layer with
  a bias.
- Mistral: Llama with sliding-window causal attention (`kind: sliding`), through the Llama mapping.
- GPT-NeoX (Pythia): each sub-layer with a LayerNorm of its own, in parallel from the block's
  input (`parallel: true`) or one after the other (the MLP reads the attention's residual sum, a
  `from:` made by an expression); rotary over the first rotary_pct = 1/4 of each head, turning the
  halves; query_key_value's rows grouped by head, regrouped by the mapping into [q; k; v].
- BLOOM: ALiBi instead of positions, a LayerNorm on the embeddings, an output layer tied to them;
  at 6 heads, a count that is not a power of two, whose slopes are not one geometric run.
- OPT: learned positions read at the position plus 2 (`pos_offset: 2`, so that embed_positions,
  max_position_embeddings + 2 rows, loads as it is), counted from the attention mask, so that a
  left-padded row starts at its first real token; a ReLU MLP; the hub's OPTModel checkpoints load.
- Phi: attention and the MLP in parallel from one shared LayerNorm, rotary over the first
  partial_rotary_factor of each head (0.4: 12 of 32, phi-2's; 0.5: 8 of 16, phi-1.5's), biases
  everywhere, the output layer's included.

The noise: 0.05 on every parameter as elsewhere, and 0.5 more on the query and key projections
(each case names its tensors), so that the attention is sharp: under near-uniform attention a
wrong rotary convention, window, residual form or ALiBi slope moves the logits little (a user
trial measured 0.049 against logits up to 1.4). `test_the_checks_can_fail` builds each spec
wrongly from the same weights (each case lists how) and finds logits far past the tolerance.
Logits and the next-token loss agree within 1e-5 (relative where the logits exceed 1) at 24
tokens (past Mistral's window of 8) and at 5; greedy generation through archspec's KV cache gives
Hugging Face's tokens, and for OPT and Phi on a left-padded batch with its attention mask too;
other checkpoint forms load without warnings; FLOPs agree with FlopCounterMode at the longest
length.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch
import torch.nn as nn

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import FLOPS_REL, TOL, close, count_flops, ids, param_count, perturb_everything

pytest.importorskip("transformers")

VOCAB = 1000
LENGTHS = (24, 5)
SHARP = 0.5  # extra noise on the query and key projections


# -- the references ---------------------------------------------------------------------------------


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


OPT_PAD = 1  # OPT's (and the Phi configuration's) pad_token_id


def opt():
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(hidden_size=128, ffn_dim=512, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
                       max_position_embeddings=128, word_embed_proj_dim=128, pad_token_id=OPT_PAD, bos_token_id=2,
                       eos_token_id=2)
    return OPTForCausalLM._from_config(config, attn_implementation="eager")


def phi(heads: int, rotary: float):
    from transformers import PhiConfig, PhiForCausalLM

    config = PhiConfig(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=heads,
                       partial_rotary_factor=rotary, vocab_size=VOCAB, max_position_embeddings=128,
                       bos_token_id=0, eos_token_id=0, pad_token_id=OPT_PAD)
    return PhiForCausalLM._from_config(config, attn_implementation="eager")


# -- other checkpoint forms: the reference's state dict as other releases hold it -------------------


def pythia_checkpoint(ref: nn.Module) -> dict:
    """GPT-NeoX as the hub's Pythia checkpoints hold it: embed_out, and the causal mask, masked_bias
    and inv_freq buffers."""
    state = {("embed_out.weight" if key == "lm_head.weight" else key): value for key, value in ref.state_dict().items()}
    for i in range(2):
        prefix = f"gpt_neox.layers.{i}.attention."
        state[prefix + "bias"] = torch.tril(torch.ones(128, 128, dtype=torch.bool)).view(1, 1, 128, 128)
        state[prefix + "masked_bias"] = torch.tensor(-1e9)
        state[prefix + "rotary_emb.inv_freq"] = 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8)
    return state


def bloom_model_checkpoint(ref: nn.Module) -> dict:
    """BLOOM as BloomModel holds it: no `transformer.` prefix, no lm_head."""
    return ref.transformer.state_dict()


def opt_model_checkpoint(ref: nn.Module) -> dict:
    """OPT as the hub's checkpoints hold it (OPTModel's): `decoder.` without `model.`, no lm_head."""
    state = ref.model.state_dict()
    assert all(key.startswith("decoder.") for key in state)
    return state


def phi_checkpoint_with_rotary_tables(ref: nn.Module) -> dict:
    """Phi with the rotary tables older checkpoints hold."""
    head_dim = 128 // ref.config.num_attention_heads
    rope = int(head_dim * ref.config.rope_parameters["partial_rotary_factor"])
    inv_freq = 1.0 / 10000 ** (torch.arange(0, rope, 2).float() / rope)
    return {**ref.state_dict(), "model.rotary_emb.inv_freq": inv_freq, "model.rotary_emb.original_inv_freq": inv_freq}


# -- wrong builds from the same weights, which the checks must tell apart ----------------------------


def geometric_slopes(heads: int) -> torch.Tensor:
    """2^(-8i/n), i = 1..n: ALiBi's slopes for n a power of two, wrong for any other n."""
    return torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])


def alibi_kernels(model: nn.Module) -> list[nn.Module]:
    """The attention kernels whose mask rule is ALiBi's."""
    from archspec.compiler.modules.attention.alibi import AlibiMask

    found = [m for m in model.modules() if isinstance(getattr(m, "keys", None), AlibiMask)]
    assert found
    return found


def with_geometric_slopes(pair: Pair) -> nn.Module:
    """BLOOM at 6 heads with the slopes a power of two would have, 2^(-8i/6), not the paper's."""
    model = pair.build()
    heads = pair.ref.config.n_head
    assert not math.log2(heads).is_integer()
    for kernel in alibi_kernels(model):
        kernel.table.copy_(geometric_slopes(heads).view(heads, 1, 1))
    return model


def edited(old: str, new: str) -> Callable[[Pair], nn.Module]:
    """The spec with `old` (found once) made `new`, from the same weights."""
    return lambda pair: pair.build_text(old, new)


def overridden(**overrides) -> Callable[[Pair], nn.Module]:
    """The spec with these params set, from the same weights."""
    return lambda pair: pair.build(**overrides)


# -- the cases --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LM:
    spec: str
    reference: Callable[[], nn.Module]
    params: int  # the spec's parameter count at these overrides (= the reference's)
    wrong: tuple[Callable[[Pair], nn.Module], ...]  # builds whose logits must differ
    overrides: dict = field(default_factory=dict)
    sharp: tuple[str, ...] = ("q_proj.weight", "k_proj.weight")  # the tensors given SHARP more noise
    other_checkpoint: Callable[[nn.Module], dict] | None = None
    pad: int = 0  # pad_token_id for Hugging Face's generate
    left_padded: bool = False  # generation of a left-padded batch with its mask is compared too


ROTATE_PAIRS = edited('rope_dims: "${rope_dims}",', 'rope_dims: "${rope_dims}", rope_interleaved: true,')
CASES = {
    "gptj": LM("gptj", gptj, 652_264, (edited("rope_interleaved: true", "rope_interleaved: false"),)),
    "mistral": LM("mistral", mistral, 551_552, (edited("window: 8 ", "window: 7 "),)),
    "gpt_neox": LM("gpt_neox", lambda: gpt_neox(parallel=True), 652_800,
                   (overridden(parallel=False), overridden(rotary_pct=0.5)),
                   sharp=("query_key_value.weight",), other_checkpoint=pythia_checkpoint),
    "gpt_neox_sequential": LM("gpt_neox", lambda: gpt_neox(parallel=False), 652_800,
                              (overridden(parallel=True), overridden(rotary_pct=0.5)),
                              overrides={"parallel": False}, sharp=("query_key_value.weight",),
                              other_checkpoint=pythia_checkpoint),
    "bloom": LM("bloom", lambda: bloom(128, 4), 525_056, (edited("kind: alibi", "kind: causal"),),
                sharp=("query_key_value.weight",), other_checkpoint=bloom_model_checkpoint),
    "bloom_6_heads": LM("bloom", lambda: bloom(96, 6), 320_064,
                        (edited("kind: alibi", "kind: causal"), with_geometric_slopes),
                        overrides={"dim": 96, "heads": 6}, sharp=("query_key_value.weight",),
                        other_checkpoint=bloom_model_checkpoint),
    "opt": LM("opt", opt, 541_440, (overridden(pos_offset=0, context=130), edited("act: relu", "act: gelu")),
              sharp=("q_proj.weight", "k_proj.weight", "v_proj.weight"), other_checkpoint=opt_model_checkpoint,
              pad=OPT_PAD, left_padded=True),
    "phi": LM("phi", lambda: phi(4, 0.4), 653_288, (overridden(rotary_factor=0.5), ROTATE_PAIRS),
              sharp=("q_proj.weight", "k_proj.weight", "v_proj.weight"),
              other_checkpoint=phi_checkpoint_with_rotary_tables, pad=OPT_PAD, left_padded=True),
    "phi_half_rotary_8_heads": LM("phi", lambda: phi(8, 0.5), 653_288,
                                  (overridden(rotary_factor=0.25), ROTATE_PAIRS),
                                  overrides={"heads": 8, "rotary_factor": 0.5},
                                  sharp=("q_proj.weight", "k_proj.weight", "v_proj.weight"),
                                  other_checkpoint=phi_checkpoint_with_rotary_tables, pad=OPT_PAD, left_padded=True),
}


def sharpened(model: nn.Module, names: tuple[str, ...]) -> nn.Module:
    """Seeded noise on every parameter, and SHARP more on the named projections."""
    perturb_everything(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(names):
                p.add_(SHARP * torch.randn(p.shape, generator=generator))
    return model


class Pair:
    """One case's reference and ours, loaded from the reference's own state dict file."""

    def __init__(self, name: str, folder):
        torch.manual_seed(0)
        self.name, self.case = name, CASES[name]
        self.ref = sharpened(self.case.reference().eval(), self.case.sharp)
        self.weights = str(folder / f"{name}.pt")
        torch.save(self.ref.state_dict(), self.weights)
        self.path = str(ROOT / "specs" / f"{self.case.spec}.yaml")
        self.report = archspec.check(self.path, overrides=self.case.overrides)
        self.ours = self.build()
        self.padded_tokens = None

    def build(self, **overrides) -> nn.Module:
        return archspec.build(self.path, {**self.case.overrides, **overrides}, weights=self.weights).eval()

    def build_text(self, old: str, new: str) -> nn.Module:
        text = (ROOT / "specs" / f"{self.case.spec}.yaml").read_text()
        assert text.count(old) == 1, old
        return archspec.build_text(text.replace(old, new), self.case.overrides, weights=self.weights).eval()

    def reference_generate_padded(self) -> torch.Tensor:
        """Hugging Face's greedy tokens for the left-padded batch, 15 new ones (made once)."""
        if self.padded_tokens is None:
            input_ids, mask = left_padded()
            with torch.no_grad():
                self.padded_tokens = self.ref.generate(input_ids, attention_mask=mask, max_new_tokens=15,
                                                       min_new_tokens=15, do_sample=False, pad_token_id=self.case.pad,
                                                       eos_token_id=None)
        return self.padded_tokens


@pytest.fixture(scope="module")
def pairs(request, tmp_path_factory) -> Callable[[str], Pair]:
    """Each case's pair, made the first time a test asks for it and kept for the module."""
    folder, made = scratch(request, tmp_path_factory, "weights"), {}

    def pair(name: str) -> Pair:
        if name not in made:
            made[name] = Pair(name, folder)
        return made[name]

    return pair


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of 10, 7 and 4 tokens, left-padded to 10, and their attention mask."""
    input_ids = ids(3, 10, VOCAB, seed=4).clamp(min=OPT_PAD + 1)
    mask = torch.ones_like(input_ids)
    for row, pad in ((1, 3), (2, 6)):
        input_ids[row, :pad], mask[row, :pad] = OPT_PAD, 0
    return input_ids, mask


# -- the tests --------------------------------------------------------------------------------------

ALL = list(CASES)
WITH_OTHER_CHECKPOINTS = [name for name, case in CASES.items() if case.other_checkpoint]
LEFT_PADDED = [name for name, case in CASES.items() if case.left_padded]


@pytest.mark.parametrize("name", ALL)
def test_parameter_count(pairs, name):
    pair = pairs(name)
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref) == pair.case.params


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("name", ALL)
def test_logits_and_loss_match(pairs, name, length):
    pair = pairs(name)
    input_ids = ids(2, length, VOCAB)
    with torch.no_grad():
        out = pair.ref(input_ids=input_ids, labels=input_ids)
        logits, loss = pair.ours(input_ids), pair.ours.loss(input_ids, input_ids)
    diffs = {"logits": close(out.logits, logits), "loss": close(out.loss, loss)}
    assert all(d < TOL for d in diffs.values()), diffs  # all(): a NaN fails, where max() would hide it


@pytest.mark.parametrize("name", ALL)
def test_greedy_generation_gives_the_references_tokens(pairs, name):
    """The KV cache path: rotary angles, OPT's position rows and ALiBi's distances at each new
    position, Mistral's window over the cache."""
    pair = pairs(name)
    prompt = ids(1, 6, VOCAB, seed=3)
    with torch.no_grad():
        theirs = pair.ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                                   do_sample=False, pad_token_id=pair.case.pad, eos_token_id=None)
        ours = pair.ours.generate(prompt, max_new_tokens=20)
    assert ours.tolist() == theirs.tolist()


@pytest.mark.parametrize("name", LEFT_PADDED)
def test_left_padded_generation_gives_the_references_tokens(pairs, name):
    """A batch of prompts of three lengths, left-padded: OPT's positions (and Phi's rotary angles)
    count from each row's first real token, as Hugging Face counts them from the mask; without the
    mask the padded rows come out otherwise."""
    pair = pairs(name)
    input_ids, mask = left_padded()
    theirs = pair.reference_generate_padded()
    with torch.no_grad():
        ours = pair.ours.generate(input_ids, attention_mask=mask, max_new_tokens=15)
        unmasked = pair.ours.generate(input_ids, max_new_tokens=15)
    assert ours.tolist() == theirs.tolist()
    assert unmasked[0].tolist() == theirs[0].tolist()  # the row without padding
    assert all(unmasked[row].tolist() != theirs[row].tolist() for row in (1, 2))


@pytest.mark.parametrize("name", ALL)
def test_the_checks_can_fail(pairs, name):
    """Each case's wrong builds (another rotary convention or fraction, window, residual form,
    position offset or activation; no ALiBi, or the wrong slopes) from the same weights give
    logits far past the tolerance."""
    pair = pairs(name)
    input_ids = ids(2, 24, VOCAB)
    with torch.no_grad():
        gaps = [close(pair.ours(input_ids), wrong(pair)(input_ids)) for wrong in pair.case.wrong]
    assert gaps and all(gap > 100 * TOL for gap in gaps), gaps


@pytest.mark.parametrize("name", WITH_OTHER_CHECKPOINTS)
def test_other_checkpoint_forms_load_without_warnings(pairs, name, tmp_path, caplog):
    """The same logits, and the load warns of nothing."""
    pair = pairs(name)
    path = tmp_path / "other.pt"
    torch.save(pair.case.other_checkpoint(pair.ref), path)
    with caplog.at_level(logging.WARNING, logger="archspec"):
        other = archspec.build(pair.path, pair.case.overrides, weights=str(path)).eval()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    input_ids = ids(2, 24, VOCAB)
    with torch.no_grad():
        assert close(pair.ours(input_ids), other(input_ids)) == 0


@pytest.mark.parametrize("name", ALL)
def test_flops_match_flop_counter(pairs, name):
    pair = pairs(name)
    length = pair.report.graph.dims["L"].hi
    measured = count_flops(lambda: pair.ref(input_ids=ids(1, length, VOCAB)))
    assert pair.report.flops == pytest.approx(measured, rel=FLOPS_REL), (pair.report.flops, measured)


@pytest.mark.parametrize("heads", [4, 6, 12, 16, 20])
def test_alibi_slopes_are_the_references(heads):
    """BLOOM's slopes are Hugging Face's build_alibi_tensor's, for every head count (6: 2^-2, 2^-4,
    2^-6, 2^-8, then 2^-1, 2^-3), the geometric run only for a power of two. To the last bit or
    so: Hugging Face raises a float32 base to integer powers (at 16 heads its second slope is
    0.49999997), archspec rounds the exact powers of two."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    theirs = build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)[:, 0, 1]  # slope * distance 1
    model = archspec.build(ROOT / "specs" / "bloom.yaml", {"dim": 8 * heads, "heads": heads, "layers": 1})
    for kernel in alibi_kernels(model):
        torch.testing.assert_close(kernel.table.flatten(), theirs, rtol=1e-6, atol=0)
    geometric = torch.allclose(geometric_slopes(heads), theirs, rtol=1e-6, atol=0)
    assert geometric == math.log2(heads).is_integer()
