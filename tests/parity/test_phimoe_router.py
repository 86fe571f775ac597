"""`router_score: sparsemixer` against Hugging Face's PhimoeSparseMoeBlock: in eval, the same
outputs (its two experts, each weighted by a softmax over the logits within 2 x jitter of its
own); in training, with the same seed, the same Gumbel choices, input jitter, outputs and
gradients (Heun's third-order estimate at the router). The PhiMoE trial wrote the router as 29
nodes a layer, eval only."""

from __future__ import annotations

import pytest
import torch

import archspec

from tests.parity.test_vocabulary import perturb_everything

transformers = pytest.importorskip("transformers")
phimoe = pytest.importorskip("transformers.models.phimoe.modeling_phimoe")

SPEC = """name: moe
inputs:
  x: [B, 9, 16]
graph:
  - id: moe
    mlp: {hidden: 24, experts: 4, top_k: 2, gated: true, act: silu, bias: false, norm: none, residual: false,
          router_score: sparsemixer, router_jitter: 0.3, router_input_jitter: 0.01}
"""


def pair():
    config = transformers.PhimoeConfig(hidden_size=16, intermediate_size=24, num_local_experts=4,
                                       num_experts_per_tok=2, router_jitter_noise=0.3, input_jitter_noise=0.01,
                                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                       vocab_size=50)
    torch.manual_seed(0)
    block = phimoe.PhimoeSparseMoeBlock(config)
    with torch.no_grad():  # the experts' tensors are made with torch.empty: initialise them here
        for parameter in block.parameters():
            parameter.normal_(0.0, 0.2)
    perturb_everything(block, seed=1)
    with torch.no_grad():
        block.router.weight.mul_(3)  # sharp logits: some tokens with one expert in reach, some with several
    ours = archspec.build_text(SPEC, seed=0)
    sd = block.state_dict()
    ours.load_state_dict({"moe.router.weight": sd["router.weight"], "moe.experts.fc1": sd["experts.gate_up_proj"],
                          "moe.experts.fc2": sd["experts.down_proj"]})
    return block, ours


def test_eval_outputs_are_phimoes():
    block, ours = pair()
    block.eval(), ours.eval()
    x = torch.randn(3, 9, 16)
    with torch.no_grad():
        want = block(x.clone())
        got = ours(x)
    assert (got - want).abs().max() < 1e-5 * max(1.0, want.abs().max().item())
    with torch.no_grad():  # the weights of some tokens are below 1: the jitter reach is exercised
        weights = ours.moe.router.weights(ours.moe.router(x.reshape(-1, 16)))
    assert ((weights > 0).sum(-1) == 2).all() and (weights.max(-1)[0] < 0.999).any()


def test_a_seeded_training_step_is_phimoes():
    block, ours = pair()
    block.train(), ours.train()
    x = torch.randn(3, 9, 16)
    torch.manual_seed(5)
    want = block(x.clone())
    want.square().sum().backward()
    torch.manual_seed(5)
    got = ours(x)
    got.square().sum().backward()
    assert (got - want).abs().max() < 1e-5 * max(1.0, want.abs().max().item())
    for ours_name, theirs in (("moe.router.weight", block.router.weight), ("moe.experts.fc1", block.experts.gate_up_proj),
                              ("moe.experts.fc2", block.experts.down_proj)):
        grad = dict(ours.named_parameters())[ours_name].grad
        assert (grad - theirs.grad).abs().max() < 1e-5 * max(1.0, theirs.grad.abs().max().item()), ours_name


@pytest.mark.parametrize("options,message", [
    ("top_k: 3, router_score: sparsemixer", "sparsemixer picks 2 experts per token, and top_k is 3"),
    ("top_k: 2, router_jitter: 0.1", "router_jitter goes with router_score: sparsemixer"),
    ("top_k: 2, router_score: sparsemixer, router_normalize: false", "router_normalize is another router's option"),
])
def test_refusals(options, message):
    text = f"name: e\ninputs:\n  x: [B, 4, 8]\ngraph:\n  - {{mlp: {{hidden: 8, experts: 4, {options}}}}}\n"
    with pytest.raises(archspec.SpecError, match=message):
        archspec.check_text(text)


def test_exports_and_runs_in_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    from archspec.compiler.backends.export import export_program
    from archspec.compiler.backends.onnx import export_onnx

    _, ours = pair()
    ours.eval()
    graph = archspec.check_text(SPEC).graph
    assert export_onnx(ours, graph, str(tmp_path / "moe.onnx")).max_difference < 1e-5  # at another batch
    x = torch.randn(5, 9, 16)
    with torch.no_grad():
        assert torch.allclose(export_program(ours, graph).module()(x), ours(x), atol=1e-6)
