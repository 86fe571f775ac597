"""specs/mixtral.yaml against Hugging Face transformers' MixtralForCausalLM, in the manner of
tests/parity/test_vocabulary.py (whose helpers it uses).

The reference is built from MixtralConfig(hidden_size=256, intermediate_size=512,
num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, num_local_experts=4,
num_experts_per_tok=2, vocab_size=1000, sliding_window=None) with random init and its own
default expert kernel (grouped_mm), seeded noise goes on *every* parameter, its state dict is
saved to a file, and `archspec.build(spec, weights=FILE)` alone loads it (the spec names
mappings/hf_mixtral.yaml). Then the parameter counts agree (reference = module = checker) and
the logits and the next-token loss agree within 1e-5 (relative where the logits exceed 1), at
batch 2 and 7 and 33 tokens, and at a size changed with `--set` (8 experts, top 2 of them; 3
layers, 4 heads, 1 key/value head).

FLOPs are compared without asserting equality with a FlopCounterMode count of the reference:
Hugging Face's default experts (grouped_mm) are invisible to FlopCounterMode, and archspec
computes the mixture densely (every expert on every token), experts / top_k times the expert
FLOPs of a sparse kernel. The test prints the three numbers and asserts how they relate.
"""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.conftest import ROOT, scratch
from tests.parity.test_vocabulary import TOL, close, count_flops, ids, param_count, perturb_everything

pytest.importorskip("transformers")

SPEC = str(ROOT / "specs" / "mixtral.yaml")
BATCH = 2
LENGTHS = (7, 33)  # the sequence lengths compared at the default size

# (spec overrides, MixtralConfig arguments) of each size compared
DEFAULT = ({}, dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                    num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, vocab_size=1000,
                    sliding_window=None))
RESIZED = ({"dim": 128, "hidden": 192, "layers": 3, "heads": 4, "kv_heads": 1, "experts": 8, "top_k": 2,
            "vocab": 500},
           dict(hidden_size=128, intermediate_size=192, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=1, num_local_experts=8, num_experts_per_tok=2, vocab_size=500,
                sliding_window=None))


def reference(config_args: dict, experts: str | None = None):
    """MixtralForCausalLM with eager attention; `experts` picks Hugging Face's expert kernel
    ("eager": a loop over the experts that FlopCounterMode sees; None: the default)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    kwargs = {"experts_implementation": experts} if experts is not None else {}
    model = MixtralForCausalLM._from_config(MixtralConfig(**config_args), attn_implementation="eager", **kwargs)
    return model.eval()


class Pair:
    """Reference (noise on every parameter) and ours, loaded from the reference's own checkpoint file."""

    def __init__(self, overrides: dict, config_args: dict, folder):
        torch.manual_seed(0)
        self.overrides, self.config_args = overrides, config_args
        self.ref = perturb_everything(reference(config_args))
        path = folder / "mixtral.pt"
        torch.save(self.ref.state_dict(), path)
        self.report = archspec.check(SPEC, overrides)
        self.ours = archspec.build(SPEC, overrides, weights=str(path)).eval()


@pytest.fixture(scope="module", params=[DEFAULT, RESIZED], ids=["default", "resized"])
def pair(request, tmp_path_factory) -> Pair:
    overrides, config_args = request.param
    return Pair(overrides, config_args, scratch(request, tmp_path_factory, "weights"))


def test_the_reference_config_is_as_the_spec_says():
    """The header's defaults: rope_theta 1e6, RMSNorm eps 1e-5, an untied output layer."""
    from transformers import MixtralConfig

    config = MixtralConfig(**DEFAULT[1])
    assert config.rope_parameters["rope_theta"] == 1e6 and config.rms_norm_eps == 1e-5
    assert config.tie_word_embeddings is False and config.hidden_act == "silu"
    assert config.router_jitter_noise == 0.0  # no noise on the router's input (in training either)


def test_parameter_count(pair):
    assert param_count(pair.ours) == pair.report.params == param_count(pair.ref)


def test_the_default_size_has_the_headers_parameter_count():
    assert archspec.check(SPEC).params == 3_988_736


@pytest.mark.parametrize("length", LENGTHS)
def test_logits_and_loss_match(pair, length):
    vocab = pair.config_args["vocab_size"]
    input_ids = ids(BATCH, length, vocab)
    with torch.no_grad():
        out = pair.ref(input_ids=input_ids, labels=input_ids)
        logits = pair.ours(input_ids)
        loss = pair.ours.loss(input_ids, input_ids)
    diffs = {"logits": close(out.logits, logits), "loss": close(out.loss, loss)}
    assert all(d < TOL for d in diffs.values()), diffs  # all(): a NaN fails, where max() would hide it


def test_the_routing_matters_here(pair):
    """Tokens go to different pairs of experts in every layer: a wrong router or expert order would show."""
    input_ids = ids(BATCH, LENGTHS[-1], pair.config_args["vocab_size"])
    chosen = {}
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, i, o, n=n: chosen.__setitem__(n, o[2]))
             for n, layer in enumerate(pair.ref.model.layers)]
    try:
        with torch.no_grad():
            pair.ref(input_ids=input_ids)
    finally:
        for hook in hooks:
            hook.remove()
    experts = pair.config_args["num_local_experts"]
    for layer, index in chosen.items():
        pairs = {tuple(sorted(row.tolist())) for row in index}
        assert len(pairs) > 1, (layer, pairs)
        assert set(index.flatten().tolist()) == set(range(experts)), layer  # every expert used


def test_flops_dense_versus_the_reference():
    """archspec's count is the dense one: the reference's with its sparse experts (Hugging Face's
    eager expert loop, which FlopCounterMode sees) plus the experts each token skips. The default
    grouped_mm kernel hides the experts from FlopCounterMode altogether."""
    length = LENGTHS[-1]
    overrides, config_args = DEFAULT
    report = archspec.check(SPEC, {**overrides, "context": length})  # FLOPs per sample at the longest length
    assert report.graph.dims["L"].hi == length
    input_ids = ids(1, length, config_args["vocab_size"])
    sparse = count_flops(lambda: reference(config_args, experts="eager")(input_ids=input_ids))
    hidden_kernel = count_flops(lambda: reference(config_args)(input_ids=input_ids))
    dim, hidden = config_args["hidden_size"], config_args["intermediate_size"]
    experts, top_k = config_args["num_local_experts"], config_args["num_experts_per_tok"]
    per_expert_token = 2 * 3 * dim * hidden  # gate, up and down: multiply-add = 2
    expert_flops = config_args["num_hidden_layers"] * length * top_k * per_expert_token  # what a sparse kernel does
    print(f"mixtral FLOPs at {length} tokens: archspec (dense) {report.flops:,}; HF eager experts "
          f"(sparse) {sparse:,}; HF grouped_mm (experts invisible) {hidden_kernel:,}")
    assert hidden_kernel == sparse - expert_flops
    assert report.flops == pytest.approx(sparse + (experts / top_k - 1) * expert_flops, rel=0.01)


def test_a_save_pretrained_folder_loads_its_experts_one_by_one(pair, tmp_path):
    """Hugging Face's checkpoint files (save_pretrained, the Hub) keep the block as
    block_sparse_moe and each expert as w1/w3/w2 of its own, not the stacked tensors of its
    state dict: the mapping's stack rule joins them, and the logits are the same."""
    from safetensors import safe_open

    pair.ref.save_pretrained(tmp_path / "hf")
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as f:
        assert "model.layers.0.block_sparse_moe.experts.1.w3.weight" in f.keys()  # the files' own naming
    ours = archspec.build(SPEC, pair.overrides, weights=str(tmp_path / "hf" / "model.safetensors")).eval()
    input_ids = ids(BATCH, LENGTHS[0], pair.config_args["vocab_size"])
    with torch.no_grad():
        assert close(pair.ref(input_ids=input_ids).logits, ours(input_ids)) < TOL
