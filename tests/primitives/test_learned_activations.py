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


def test_an_mlp_with_star_relu_and_res_scale_is_timms_metaformer_sublayer():
    """CAFormer's MLP sub-layer, x * res_scale + ls * mlp(norm(x)) with StarReLU and no biases, in
    one node (the CAFormer trial wrote 5 nodes for the activation and 3 for each res_scale), as
    timm's own pieces compute it: Scale, Mlp(act_layer=StarReLU), a LayerNorm without bias."""
    pytest.importorskip("timm")
    from timm.layers import Mlp
    from timm.models.metaformer import Scale, StarReLU

    spec = """
name: metaformer_mlp
inputs: {x: [B, 49, 32]}
graph:
  - {id: mlp, mlp: {hidden: 128, act: star_relu, bias: false, norm_bias: false, norm_eps: 1.0e-6,
                    res_scale: 1.0, layer_scale: 1.0}}
"""
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(32, eps=1e-6, bias=False)
    mlp = Mlp(32, 128, act_layer=StarReLU, bias=False)
    res_scale, layer_scale = Scale(32, 1.0, use_nchw=False), Scale(32, 1.0, use_nchw=False)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in (norm, mlp, res_scale, layer_scale):
            for p in module.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.3)
    model = archspec.build_text(spec).eval()
    report = archspec.check_text(spec)
    assert report.params == sum(p.numel() for m in (norm, mlp, res_scale, layer_scale) for p in m.parameters())
    model.load_state_dict({"mlp.norm.weight": norm.weight, "mlp.fc1.weight": mlp.fc1.weight,
                           "mlp.fc2.weight": mlp.fc2.weight, "mlp.act.scale": mlp.act.scale,
                           "mlp.act.bias": mlp.act.bias, "mlp.res_scale.gamma": res_scale.scale,
                           "mlp.layer_scale.gamma": layer_scale.scale})
    x = torch.randn(2, 49, 32)
    with torch.no_grad():
        assert torch.allclose(model(x), res_scale(x) + layer_scale(mlp(norm(x))), atol=1e-5)
