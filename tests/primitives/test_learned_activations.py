"""Activations with learned scalars, each one word where the trials wrote 5 and 17 nodes:
`star_relu` (timm's StarReLU, s * relu(x)^2 + b: CAFormer, ConvFormer) and `xielu` (Hugging
Face's XIELUActivation: Apertus), as an `activation` node's `fn` and an mlp's `act`; their
scalars are counted, named as the references name them, loaded and trained."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """
name: acts
inputs: {x: [B, 8, 32]}
graph:
  - {id: act, activation: {fn: FN}}
  - {id: mlp, mlp: {hidden: 64, act: FN}}
"""


def built(fn: str):
    text = SPEC.replace("FN", fn)
    torch.manual_seed(0)
    return archspec.build_text(text).eval(), archspec.check_text(text)


def test_star_relu_is_timms_and_its_scalars_are_counted():
    timm = pytest.importorskip("timm")
    from timm.models.metaformer import StarReLU

    model, report = built("star_relu")
    assert report.params == sum(p.numel() for p in model.parameters())
    assert report.graph.node("act").meta["cost"].params == 2
    theirs = StarReLU()
    with torch.no_grad():
        theirs.scale.fill_(0.7), theirs.bias.fill_(-0.3)
    model.act.load_state_dict(theirs.state_dict(), strict=False)  # relu has no state: timm's names are ours
    assert set(theirs.state_dict()) == set(model.act.state_dict()) == {"scale", "bias"}
    x = torch.randn(2, 8, 32) * 3
    with torch.no_grad():
        assert torch.equal(model.act(x), theirs(x))


def test_xielu_is_hugging_faces_and_its_scalars_train():
    activations = pytest.importorskip("transformers.activations")
    model, report = built("xielu")
    assert report.params == sum(p.numel() for p in model.parameters())
    theirs = activations.XIELUActivation(dtype=torch.float32)
    with torch.no_grad():
        theirs.alpha_p.add_(0.3), theirs.alpha_n.sub_(0.2)
    assert set(theirs.state_dict()) == set(model.mlp.act.state_dict()) == {"alpha_p", "alpha_n", "beta", "eps"}
    model.mlp.act.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 8, 64) * 3
    assert torch.allclose(model.mlp.act(x), theirs._xielu_python(x), atol=1e-6)
    model.train()
    model(torch.randn(2, 8, 32)).square().mean().backward()
    assert model.mlp.act.alpha_p.grad is not None and model.mlp.act.alpha_n.grad.abs().item() > 0
