"""specs/opt.yaml against Hugging Face transformers' OPTForCausalLM and specs/phi.yaml against
PhiForCausalLM, small configurations, in the manner of tests/test_parity_neox_bloom.py (and with
the helpers of tests/test_parity_vocabulary.py): two decoder-only models first written from the
docs alone, in a user trial, then shipped.

OPT: learned positions read at the position plus 2 (the embed's `pos_offset: 2`, so that
embed_positions, max_position_embeddings + 2 rows, loads as it is), counted from the attention
mask, so that a left-padded row starts at its first real token; pre-norm blocks, a ReLU MLP, an
output layer tied to the token table; the hub's checkpoints (OPTModel's, `decoder.` without
`model.`) load too. Phi: attention and the MLP in parallel from one shared LayerNorm, rotary
embeddings over the first partial_rotary_factor of each head's dims (0.4: 12 of 32, phi-2's
fraction; 0.5: 8 of 16, phi-1.5's), turning the halves; biases everywhere, the output layer's
included.

The noise: 0.05 on every parameter as elsewhere, and 0.5 more on the query, key and value
projections, so that the attention is sharp (a wrong rotary width or convention would otherwise
move the logits little). The tests that the checks can fail build the spec, from the same
weights, with the positions read two rows early (OPT, pos_offset 0 over the same table), a GELU
for the ReLU, another rotary fraction or the interleaved rotary pairs (Phi), and generate the
left-padded batch without its mask. Logits and the next-token loss agree within 1e-5 (relative
where the logits exceed 1) at 24 tokens and at 5; greedy generation through archspec's KV cache
gives Hugging Face's tokens, for one prompt and for a left-padded batch with its attention mask;
FLOPs agree with FlopCounterMode at the longest length. Each mapping's `identify` recognises its
own checkpoint and none of the other shipped Hugging Face namings' (GPT-2, Llama, GPT-J,
GPT-NeoX, BLOOM, Mistral, Mixtral, T5, BERT).
"""

from __future__ import annotations

import logging

import pytest
import torch

import archspec
from archspec.compiler.weights.load import SpecParams
from archspec.compiler.weights.mapping_file import read_mapping_file

from .conftest import ROOT, scratch
from .test_parity_vocabulary import FLOPS_REL, TOL, close, count_flops, ids, param_count, perturb_everything

pytest.importorskip("transformers")

VOCAB = 1000
LENGTHS = (24, 5)
SHARP = 0.5  # extra noise on the query, key and value projections
PAD = 1  # OPT's pad_token_id


def opt():
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(hidden_size=128, ffn_dim=512, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
                       max_position_embeddings=128, word_embed_proj_dim=128, pad_token_id=PAD, bos_token_id=2,
                       eos_token_id=2)
    return OPTForCausalLM._from_config(config, attn_implementation="eager")


def phi(heads: int, rotary: float):
    from transformers import PhiConfig, PhiForCausalLM

    config = PhiConfig(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=heads,
                       partial_rotary_factor=rotary, vocab_size=VOCAB, max_position_embeddings=128,
                       bos_token_id=0, eos_token_id=0, pad_token_id=PAD)
    return PhiForCausalLM._from_config(config, attn_implementation="eager")


# case -> (spec, reference, the spec's overrides, its parameter count)
CASES = {
    "opt": ("opt", opt, None, 541_440),
    "phi": ("phi", lambda: phi(4, 0.4), None, 653_288),
    "phi_half_rotary_8_heads": ("phi", lambda: phi(8, 0.5), {"heads": 8, "rotary_factor": 0.5}, 653_288),
}


def sharpened(model):
    """Seeded noise on every parameter, and more on the query, key and value projections."""
    perturb_everything(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
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

    def build_text(self, old: str, new: str):
        text = (ROOT / "specs" / f"{self.spec}.yaml").read_text()
        assert text.count(old) == 1, old
        return archspec.build_text(text.replace(old, new), self.overrides, weights=self.weights).eval()


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
    """The KV cache path: OPT's position rows and Phi's rotary angles at each new position."""
    prompt = ids(1, 6, VOCAB, seed=3)
    with torch.no_grad():
        theirs = pair.ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                                   do_sample=False, pad_token_id=PAD, eos_token_id=None)
        ours = pair.ours.generate(prompt, max_new_tokens=20)
    assert ours.tolist() == theirs.tolist()


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of 10, 7 and 4 tokens, left-padded to 10, and their attention mask."""
    input_ids = ids(3, 10, VOCAB, seed=4).clamp(min=PAD + 1)
    mask = torch.ones_like(input_ids)
    for row, pad in ((1, 3), (2, 6)):
        input_ids[row, :pad], mask[row, :pad] = PAD, 0
    return input_ids, mask


def reference_generate(pair) -> torch.Tensor:
    """Hugging Face's greedy tokens for the left-padded batch, 15 new ones (made once per pair)."""
    if getattr(pair, "padded_tokens", None) is None:
        input_ids, mask = left_padded()
        with torch.no_grad():
            pair.padded_tokens = pair.ref.generate(input_ids, attention_mask=mask, max_new_tokens=15,
                                                   min_new_tokens=15, do_sample=False, pad_token_id=PAD,
                                                   eos_token_id=None)
    return pair.padded_tokens


def test_left_padded_generation_gives_the_references_tokens(pair):
    """A batch of prompts of three lengths, left-padded: OPT's positions (and Phi's rotary angles)
    count from each row's first real token, as Hugging Face counts them from the mask."""
    input_ids, mask = left_padded()
    with torch.no_grad():
        ours = pair.ours.generate(input_ids, attention_mask=mask, max_new_tokens=15)
    assert ours.tolist() == reference_generate(pair).tolist()


def test_the_checks_can_fail(pair):
    """The same weights with OPT's positions read two rows early (pos_offset 0 over the same
    table of context + 2 rows) or a GELU for its ReLU, Phi's rotary over another fraction of each
    head or turning the pairs (2i, 2i + 1), give logits far past the tolerance; and the padded
    batch generated without its mask gives other tokens in its padded rows."""
    if pair.spec == "opt":
        others = [pair.build(pos_offset=0, context=130), pair.build_text("act: relu", "act: gelu")]
    else:
        fraction = 0.25 if (pair.overrides or {}).get("rotary_factor") == 0.5 else 0.5
        others = [pair.build(rotary_factor=fraction),
                  pair.build_text('rope_dims: "${rope_dims}",', 'rope_dims: "${rope_dims}", rope_interleaved: true,')]
    input_ids = ids(2, 24, VOCAB)
    with torch.no_grad():
        gaps = [close(pair.ours(input_ids), other(input_ids)) for other in others]
    assert all(gap > 100 * TOL for gap in gaps), gaps

    with torch.no_grad():
        unmasked = pair.ours.generate(left_padded()[0], max_new_tokens=15)
    theirs = reference_generate(pair)
    assert unmasked[0].tolist() == theirs[0].tolist()  # the row without padding
    assert all(unmasked[row].tolist() != theirs[row].tolist() for row in (1, 2))


def test_other_checkpoint_forms_load_without_warnings(pair, tmp_path, caplog):
    """OPT as the hub's checkpoints hold it (OPTModel's: `decoder.` without `model.`, no
    lm_head); Phi with the rotary tables older checkpoints hold: the same logits, and the load
    warns of nothing."""
    state = pair.ref.state_dict()
    if pair.spec == "opt":
        state = pair.ref.model.state_dict()
        assert all(key.startswith("decoder.") for key in state)
    else:
        head_dim = 128 // pair.ref.config.num_attention_heads
        rope = int(head_dim * pair.ref.config.rope_parameters["partial_rotary_factor"])
        inv_freq = 1.0 / 10000 ** (torch.arange(0, rope, 2).float() / rope)
        state = {**state, "model.rotary_emb.inv_freq": inv_freq, "model.rotary_emb.original_inv_freq": inv_freq}
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


# -- identify: each naming on its own checkpoint and no other shipped one ---------------------------


def checkpoint_keys() -> dict[str, list[str]]:
    """mapping file stem (and, in brackets, which of its checkpoints) -> the state dict keys of a
    tiny model of the Hugging Face class it maps (built on the meta device: only the names count)."""
    import transformers as t

    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
             "vocab_size": 100}
    models = {
        "hf_opt": lambda: t.OPTForCausalLM(t.OPTConfig(hidden_size=64, ffn_dim=128, num_hidden_layers=1,
                                                       num_attention_heads=4, vocab_size=100, word_embed_proj_dim=64)),
        "hf_phi": lambda: t.PhiForCausalLM(t.PhiConfig(**small)),
        "hf_gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=100,
                                                              bos_token_id=0, eos_token_id=0)),
        "hf_llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**small)),
        "hf_llama (mistral)": lambda: t.MistralForCausalLM(t.MistralConfig(**small)),
        "hf_mixtral": lambda: t.MixtralForCausalLM(t.MixtralConfig(**small, num_local_experts=2)),
        "hf_gptj": lambda: t.GPTJForCausalLM(t.GPTJConfig(n_embd=64, n_layer=1, n_head=4, rotary_dim=8,
                                                          vocab_size=100, bos_token_id=0, eos_token_id=0)),
        "hf_gpt_neox": lambda: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(**small)),
        "hf_bloom": lambda: t.BloomForCausalLM(t.BloomConfig(hidden_size=64, n_layer=1, n_head=4, vocab_size=100)),
        "hf_t5": lambda: t.T5ForConditionalGeneration(t.T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=1,
                                                                  num_heads=4, vocab_size=100)),
        "hf_bert": lambda: t.BertModel(t.BertConfig(**small)),
    }
    keys = {}
    with torch.device("meta"):
        for name, make in models.items():
            keys[name] = list(make().state_dict())
    keys["hf_opt (OPTModel)"] = [key.removeprefix("model.") for key in keys["hf_opt"] if key.startswith("model.")]
    return keys


def spec_naming(mapping) -> str:
    """The first shipped spec whose `mappings:` names this file (a rule may read its params)."""
    return str(next(spec for spec in sorted((ROOT / "specs").glob("*.yaml"))
                    if f"mappings/{mapping.name}" in spec.read_text()))


def test_identify_recognises_its_own_checkpoint_and_no_other_shipped_one():
    keys = checkpoint_keys()
    namings = {path.stem: read_mapping_file(path, params=SpecParams(None, spec_naming(path)))
               for path in sorted((ROOT / "specs" / "mappings").glob("hf_*.yaml"))}
    for ours in ("hf_opt", "hf_phi"):
        recognised = [name for name, state in keys.items() if namings[ours].applies_to(dict.fromkeys(state))]
        assert recognised == [name for name in keys if name.split()[0] == ours], (ours, recognised)
    for checkpoint in ("hf_opt", "hf_opt (OPTModel)", "hf_phi"):
        state = dict.fromkeys(keys[checkpoint])
        claimed = [stem for stem, naming in namings.items() if naming.applies_to(state)]
        assert claimed == [checkpoint.split()[0]], (checkpoint, claimed)
    for name, state in keys.items():  # and each other checkpoint is still its own naming's
        stem = name.split()[0]
        assert namings[stem].applies_to(dict.fromkeys(state)), name
